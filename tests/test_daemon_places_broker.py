"""A county-level places stream in the worker on a real broker (issue 29).

``county_admissions.toml`` (3,194 places x 2 sexes = 6,388 counters, sensitivity 3) runs in a
``streamdp worker`` subprocess: it publishes exactly the records a replay of the same input
makes (same seeded noise), and every published consistent count and running total of every
place equals the sum of its children's to 1e-6, in every cell.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

from daemon_harness import (
    Scenario,
    Worker,
    close_through,
    collect,
    create_topics,
    has_all,
    lines_as_records,
    produce,
    replay_outputs,
)

from streamdp.broker import EmbeddedBroker
from streamdp.daemon.routing import OutputTopics
from streamdp.engine import parse_spec
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
