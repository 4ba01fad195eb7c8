"""A county-level places stream in the worker on a real broker (issue 29).

``county_admissions.toml`` (3,194 places x 2 sexes = 6,388 counters, sensitivity 3) runs in a
``streamdp worker`` subprocess: it publishes exactly the records a replay of the same input
makes (same seeded noise), and every published consistent count and running total of every
place equals the sum of its children's to 1e-6, in every cell.

With the producer's request limit at the least the worker accepts, the same stream with 60
periods open at once has a hot state longer than that limit: the worker stores it in pieces
(and its nodes in parts), is SIGKILLed, restarts from them and publishes what an
uninterrupted replay does.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

from daemon_harness import (
    SEED,
    UNIT_KEY,
    Scenario,
    Worker,
    close_records,
    close_through,
    collect,
    create_topics,
    group_members,
    has_all,
    lines_as_records,
    produce,
    replay_outputs,
    wait_consumed,
    wait_session_expired,
    wait_sole_owner,
)

from streamdp.broker import EmbeddedBroker
from streamdp.daemon.routing import OutputTopics
from streamdp.daemon.settings import RECORD_OVERHEAD_BYTES, WRITE_BOUNDS
from streamdp.daemon.state_chunks import encoded_size
from streamdp.engine import Engine, parse_spec
from streamdp.engine.periods import parse_instant
from streamdp.noise import InsecureSeededSampler
from streamdp.synth.generators import generate, generated_end
from tests.places_fixture import merged_parts, tree_gap

PARTITIONS = 2


def _county_scenario(suffix: str, periods: int, rate: float) -> Scenario:
    """The county example with its topic renamed for this test, the places file by absolute
    path (the worker reads the spec from a temporary folder), and a ten-year lateness (the
    harness releases by operator close records on a frozen clock)."""
    examples = resources.files("streamdp").joinpath("examples")
    text = examples.joinpath("county_admissions.toml").read_text("utf-8")
    places = Path(str(examples.joinpath("counties.csv"))).resolve()
    text = text.replace('topic = "admissions"', f'topic = "admissions-{suffix}"')
    text = text.replace('places = "counties.csv"', f'places = "{places}"')
    text = re.sub(r'allowed_lateness = "[^"]*"', 'allowed_lateness = "3650d"', text)
    spec = parse_spec(text)
    scenario = Scenario(text)
    scenario.lines[f"admissions-{suffix}"] = list(
        generate("county-admissions", periods, rate, seed=7, spec=spec)
    )
    scenario.end = generated_end(spec, periods)
    return scenario


def test_a_county_stream_runs_in_the_worker_consistent_on_the_tree_and_equal_to_its_replay(
    broker: EmbeddedBroker, tmp_path: Path, unique_name
) -> None:
    suffix = unique_name("ns")
    scenario = _county_scenario(suffix, periods=9, rate=150.0)
    config = tmp_path / "streams.toml"
    config.write_text(scenario.spec_text)
    app_id = f"app-{suffix}"
    topics = OutputTopics.in_namespace(f"out-{suffix}")
    create_topics(broker, scenario, config, PARTITIONS, app_id=app_id, topics=topics)
    worker = Worker(
        broker,
        config,
        app_id=app_id,
        partitions=PARTITIONS,
        data_dir=tmp_path / "data",
        log_path=tmp_path / "w1.log",
        namespace=topics.releases.rsplit(".", 1)[0],
        clock=scenario.clock,
    )
    try:
        worker.wait_ready()
        produce(broker, lines_as_records(scenario))
        close_through(broker, scenario, topics, app_id, cut=None, partitions=PARTITIONS)
        expected = replay_outputs(scenario, topics)
        assert len(expected[topics.releases]) == 9 * 6388
        # the weekly revision: 7 periods, each in 3 records of contiguous counters
        assert len(expected[topics.consistent]) == 7 * 3
        seen = collect(broker, [topics.releases, topics.consistent], has_all(expected), timeout=180)
        for key, value in expected[topics.releases].items():
            assert set(seen[topics.releases].get(key, [])) == {value}, key
        for key, value in expected[topics.consistent].items():
            assert seen[topics.consistent].get(key, []) == [value], key
        for record in merged_parts([json.loads(v) for v in expected[topics.consistent].values()]):
            assert tree_gap(scenario.spec, record["counts"]) < 1e-6
            assert tree_gap(scenario.spec, record["totals"]) < 1e-6
        assert worker.stop() == 0, worker.log_tail()
    finally:
        if worker.process.poll() is None:
            worker.stop()


def test_a_hot_state_longer_than_the_request_limit_is_stored_in_pieces_and_restored(
    broker: EmbeddedBroker, tmp_path: Path, unique_name
) -> None:
    suffix = unique_name("wide")
    scenario = _county_scenario(suffix, periods=60, rate=5.0)
    topic = f"admissions-{suffix}"
    config = tmp_path / "streams.toml"
    config.write_text(scenario.spec_text)
    app_id = f"app-{suffix}"
    topics = OutputTopics.in_namespace(f"out-{suffix}")
    create_topics(broker, scenario, config, PARTITIONS, app_id=app_id, topics=topics)
    limit = max(WRITE_BOUNDS.values()) + RECORD_OVERHEAD_BYTES  # the least the worker takes
    day = 86_400.0
    start = parse_instant("2024-01-01T00:00:00Z")
    assert start is not None
    cuts = (start + 3 * day, start + 7 * day)  # periods 1-3, then 4-7 and the weekly revision
    # the uninterrupted run: every record, a close through each cut (the same seeded noise)
    engine = Engine(scenario.spec, sampler=InsecureSeededSampler(SEED), unit_key=UNIT_KEY)
    outputs = list(engine.advance_clock(scenario.end))
    for offset, line in enumerate(scenario.lines[topic]):
        engine.ingest(line.text.encode(), source_topic=topic, partition=0, offset=offset)
    hot = engine.take_changes().hot_state
    assert encoded_size(hot) > limit, "the hot state fits one record: the test proves nothing"
    expected: dict[str, dict[str, str]] = {topics.releases: {}, topics.consistent: {}}
    before_kill: dict[str, dict[str, str]] = {topics.releases: {}}
    for through in cuts:
        for record in [*outputs, *engine.close("admissions-by-county", through)]:
            expected[topics.for_record(record)][record.key] = record.to_json()
        outputs = []
        if not before_kill[topics.releases]:
            before_kill[topics.releases] = dict(expected[topics.releases])
    assert len(expected[topics.releases]) == 7 * 6388
    revised = {json.loads(v)["period"] for v in expected[topics.consistent].values()}
    assert revised == set(range(1, 8))  # the weekly revision of periods 1-7 (in parts)

    def start_worker(name: str) -> Worker:
        return Worker(
            broker,
            config,
            app_id=app_id,
            partitions=PARTITIONS,
            data_dir=tmp_path / name,
            log_path=tmp_path / f"{name}.log",
            namespace=topics.releases.rsplit(".", 1)[0],
            clock=scenario.clock,
            env={"STREAMDP_MAX_REQUEST_SIZE": str(limit)},
        )

    first = start_worker("w1")
    second = None
    try:
        first.wait_ready()
        produce(broker, lines_as_records(scenario))
        try:  # a hot state written whole would stop the worker here (exit status 74)
            wait_consumed(broker, app_id, {topic: len(scenario.lines[topic])}, PARTITIONS, 60)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{first.log_tail(3)}") from None
        produce(broker, close_records(scenario, topics, cuts[0]))
        collect(broker, [topics.releases], has_all(before_kill), timeout=120)
        _, killed = group_members(broker, app_id)
        first.kill()
        wait_session_expired(broker, app_id, first)
        second = start_worker("w2")
        wait_sole_owner(broker, app_id, second, scenario.spec.sources, gone=killed)
        produce(broker, close_records(scenario, topics, cuts[1]))
        seen = collect(broker, [topics.releases, topics.consistent], has_all(expected), timeout=180)
        for key, value in expected[topics.releases].items():
            assert set(seen[topics.releases].get(key, [])) == {value}, key
        for key, value in expected[topics.consistent].items():
            assert seen[topics.consistent].get(key, []) == [value], key
        changelog = f"{app_id}-state-changelog"
        keys = collect(broker, [changelog], lambda s: False, timeout=8)[changelog]
        assert any("admissions|hot|" in k for k in keys), "no hot state was stored in pieces"
        parted = [k for k, v in keys.items() if "|node|" in k and '"parts"' in v[-1]]
        assert parted, "no noisy node was stored in parts"
        rewritten = {k: len(v) for k, v in keys.items() if "|node|" in k and len(v) != 1}
        assert not rewritten, f"noisy nodes written more than once (redrawn?): {rewritten}"
        assert second.stop() == 0, second.log_tail()
    finally:
        for worker in (first, second):
            if worker is not None and worker.process.poll() is None:
                worker.stop()
