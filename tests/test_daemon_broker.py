"""The release daemon on a real Kafka-protocol broker, workers as processes.

What these tests prove:
- replay equality: a worker consuming the input topics publishes exactly the releases and final
  consistent revisions that a file replay of the same records publishes (same seed);
- crash safety: SIGKILL of a worker mid-stream and a restart give, per output key, only the
  values of an uninterrupted run (no event lost or counted twice), and every noisy node is
  written to the state changelog exactly once (never redrawn);
- rebalance: two workers share the partitions; one leaves mid-stream; the releases are still
  exactly the replay's;
- privacy units: with the hospital streams protecting patients, both the SIGKILL restart and
  the rebalance publish exactly the replay's values (the patients' counts travel with the
  checkpoint; a restore that forgot them fails the restart test);
- bad input: every bad record reaches the dead-letter topic with its reason, and every good
  event is counted (releases equal the replay's);
- metrics: /metrics served over HTTP shows the epsilon the durable ledger recorded;
- a client that never fetches an input topic ends the worker with 75 (the stall watchdog asks
  the broker for the end offset the client never learned), and its replacement is exact;
- SIGUSR1/SIGUSR2 log the diagnostic dump (tasks, partitions) and leave the worker running.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import (
    Scenario,
    Worker,
    close_through,
    collect,
    committed_offsets,
    create_topics,
    group_members,
    has_all,
    lines_as_records,
    make_scenario,
    produce,
    record_counts,
    replay_outputs,
    wait_session_expired,
    wait_sole_owner,
)
from prometheus_client.parser import text_string_to_metric_families

from streamdp.broker import EmbeddedBroker
from streamdp.daemon.routing import OutputTopics
from streamdp.errors import EXIT_INPUT_GAP
from streamdp.synth.generators import Line

pytestmark = pytest.mark.broker
PARTITIONS = 2


@pytest.fixture(params=["batch", "stream"])
def setup(broker: EmbeddedBroker, tmp_path: Path, unique_name, request):  # type: ignore[no-untyped-def]
    """A fresh namespace on the shared broker: own config, app id and topics; every test runs
    with both input paths (per-fetch batches, the default, and Faust's per-event agent)."""
    input_path = request.param
    workers: list[Worker] = []
    clocks: dict[str, str] = {}

    def make(bad_fraction: float = 0.0, periods: int = 40, rate: float = 6):  # type: ignore[no-untyped-def]
        suffix = unique_name("ns")
        scenario = make_scenario(
            periods=periods, rate=rate, bad_fraction=bad_fraction, suffix=suffix
        )
        text = scenario.spec_text
        config = tmp_path / "streams.toml"
        config.write_text(text)
        app_id = f"app-{suffix}"
        topics = OutputTopics.in_namespace(f"out-{suffix}")
        create_topics(broker, scenario, config, PARTITIONS, app_id=app_id, topics=topics)
        clocks[app_id] = scenario.clock
        return scenario, config, app_id, topics

    def start(
        config: Path,
        app_id: str,
        topics: OutputTopics,
        name: str,
        supervise: bool = True,
        extra_args: tuple[str, ...] = (),
        **options: Any,
    ) -> Worker:
        worker = Worker(
            broker,
            config,
            app_id=app_id,
            partitions=PARTITIONS,
            data_dir=tmp_path / f"data-{name}",
            log_path=tmp_path / f"{name}.log",
            namespace=topics.releases.rsplit(".", 1)[0],
            supervise=supervise,
            input_path=input_path,
            clock=clocks[app_id],
            extra_args=extra_args,
            **options,
        )
        workers.append(worker)
        return worker

    yield make, start
    for worker in workers:
        if worker.process.poll() is None:
            worker.stop()


def _node_writes(broker: EmbeddedBroker, app_id: str) -> dict[str, list[str]]:
    """Every value written to each noisy-node key of the app's state changelog."""
    topic = f"{app_id}-state-changelog"
    changelog = collect(broker, [topic], lambda s: False, timeout=8)[topic]
    return {k: v for k, v in changelog.items() if "|node|" in k}


def _assert_each_written_once(node_writes: dict[str, list[str]]) -> None:
    rewritten = {k: len(v) for k, v in node_writes.items() if len(v) != 1}
    assert not rewritten, f"noisy nodes written more than once (redrawn?): {rewritten}"


def _input_records(worker: Worker) -> float:
    """``streamdp_input_records_total`` summed over topics, from the worker's /metrics."""
    total = 0.0
    for family in text_string_to_metric_families(worker.metrics()):
        for sample in family.samples:
            if sample.name == "streamdp_input_records_total":
                total += sample.value
    return total


def _values(
    seen: dict[str, dict[str, list[str]]], expected: dict[str, dict[str, str]], T: OutputTopics
) -> None:
    """Every expected key is present; releases never had any other value; the latest
    consistent value equals the replay's final revision."""
    for key, value in expected[T.releases].items():
        values = set(seen[T.releases].get(key, []))
        assert values == {value}, f"release {key}: {values} != replay"
    for key, value in expected[T.consistent].items():
        got = seen[T.consistent].get(key, [])
        assert got, f"consistent {key} missing"
        latest = max(got, key=lambda v: json.loads(v)["revision"])
        assert latest == value, f"consistent {key} differs from replay"


def test_worker_releases_equal_a_file_replay_of_the_same_records(broker, setup) -> None:
    make, start = setup
    scenario, config, app_id, T = make()
    worker = start(config, app_id, T, "w1")
    worker.wait_ready()
    records = lines_as_records(scenario)
    produce(broker, records)
    close_through(broker, scenario, T, app_id, cut=None, partitions=PARTITIONS)
    expected = replay_outputs(scenario, T)
    stamps: dict[str, list[int]] = {}
    seen = collect(
        broker, [T.releases, T.consistent], has_all(expected), timeout=120, timestamps=stamps
    )
    _values(seen, expected, T)
    # issue 25: every release and revision carries the instant of the tick that made it, a
    # point of the tick grid (whole multiples of --tick, 0.5 s), never the moment it was sent
    for topic in (T.releases, T.consistent):
        assert stamps[topic]
        off_grid = [ms for ms in stamps[topic] if ms % 500]
        assert not off_grid, f"{topic}: timestamps off the tick grid: {off_grid[:5]}"
    # the processed input offsets get committed (the batch path acknowledges a whole batch per
    # partition at once): a restarted worker does not read the topics again from the start
    for topic in scenario.lines:
        total = sum(1 for t, _, _ in records if t == topic)
        ends = record_counts(broker, topic, total)
        deadline = time.monotonic() + 30
        while (committed := committed_offsets(broker, app_id, topic, ends)) != ends:
            assert time.monotonic() < deadline, f"{topic}: committed {committed}, ends {ends}"
            time.sleep(1.0)
    assert worker.stop() == 0, worker.log_tail()


def test_batches_compressed_with_every_codec_count_like_plain_ones(broker, setup) -> None:
    """A producer may compress its batches with any codec Kafka knows (the topic keeps the
    producer's, Kafka's default): the worker reads gzip, snappy, lz4 and zstd batches and
    publishes what a replay of the same records does. Without a codec's library one such
    record would stop the worker's input, and with it every release."""
    make, start = setup
    scenario, config, app_id, T = make(periods=12)
    worker = start(config, app_id, T, "w1")
    worker.wait_ready()
    records = lines_as_records(scenario)
    codecs = ("gzip", "snappy", "lz4", "zstd")
    part = -(-len(records) // len(codecs))
    for i, codec in enumerate(codecs):  # in order: a quarter of the records each
        produce(broker, records[i * part : (i + 1) * part], compression=codec)
    close_through(broker, scenario, T, app_id, cut=None, partitions=PARTITIONS)
    expected = replay_outputs(scenario, T)
    seen = collect(broker, [T.releases, T.consistent], has_all(expected), timeout=120)
    _values(seen, expected, T)
    assert worker.stop() == 0, worker.log_tail()


def test_a_transaction_on_an_input_topic_does_not_stop_the_worker(broker, setup) -> None:
    """A producer that writes input in a transaction puts a commit marker into each partition
    it wrote, an offset with no record. The worker refuses holes in input offsets (records a
    reader lost), so before it told the two apart one such producer stopped it on every
    restart, and with it every release. The client passes over the markers, the worker accepts
    those holes, and publishes what a replay of the same records does."""
    if isinstance(broker, EmbeddedBroker):
        pytest.skip("Tansu, the demo broker, has no transactions")
    make, start = setup
    scenario, config, app_id, T = make(periods=12)
    worker = start(config, app_id, T, "w1", supervise=False)  # an exit 75 would stay down
    worker.wait_ready()
    records = lines_as_records(scenario)
    third = len(records) // 3
    produce(broker, records[:third])
    produce(broker, records[third : 2 * third], transactional_id=f"tx-{app_id}")
    produce(broker, records[2 * third :])
    close_through(broker, scenario, T, app_id, cut=None, partitions=PARTITIONS)
    expected = replay_outputs(scenario, T)
    seen = collect(broker, [T.releases, T.consistent], has_all(expected), timeout=120)
    assert worker.process.poll() is None, worker.log_tail()
    _values(seen, expected, T)
    assert worker.stop() == 0, worker.log_tail()


def _sigkill_mid_stream_and_restart(  # type: ignore[no-untyped-def]
    broker, setup, mechanism: str = "", *, unit_key: Path | None = None
) -> tuple[str, Worker]:
    """Half the input, a close, SIGKILL once something is released, the rest of the input, a
    restart, a final close: every expected value published. ``mechanism`` replaces the
    restaurant stream's; with ``unit_key`` the hospital streams protect patients
    (:func:`_protect_patients`) and both workers read that key. Returns the app id and the
    running second worker."""
    make, start = setup
    scenario, config, app_id, T = make()
    if mechanism:
        scenario.spec_text = scenario.spec_text.replace(
            'mechanism = "fda"', f'mechanism = "{mechanism}"'
        )
        assert scenario.spec.streams["restaurant-items"].mechanism == mechanism
        config.write_text(scenario.spec_text)
    if unit_key is not None:
        _protect_patients(scenario, config)
    key_args = () if unit_key is None else ("--unit-key-file", str(unit_key))
    first = start(config, app_id, T, "w1", extra_args=key_args)
    first.wait_ready()
    half = len(scenario.lines[next(iter(scenario.lines))]) // 2
    expected = replay_outputs(scenario, T, cut=half)
    produce(broker, lines_as_records(scenario, stop=half))
    close_through(broker, scenario, T, app_id, cut=half, partitions=PARTITIONS)
    # wait until it has released something, then kill it without warning
    collect(
        broker,
        [T.releases],
        lambda seen: any(k in expected[T.releases] for k in seen[T.releases]),
        timeout=60,
    )
    _, killed = group_members(broker, app_id)  # the first worker's member id
    assert len(killed) == 1, f"the first worker is not the group's one member: {killed}"
    first.kill()
    produce(broker, lines_as_records(scenario, start=half))
    # a supervisor restarts once the group session of the killed worker expired (6 s): one
    # rebalance, not two (on Tansu the dead member is only dropped when the next one joins)
    wait_session_expired(broker, app_id, first)
    second = start(config, app_id, T, "w2", extra_args=key_args)
    wait_sole_owner(broker, app_id, second, scenario.spec.sources, gone=killed)
    close_through(broker, scenario, T, app_id, cut=None, partitions=PARTITIONS)
    seen = collect(broker, [T.releases, T.consistent], has_all(expected), timeout=150)
    _values(seen, expected, T)
    return app_id, second


def test_sigkill_mid_stream_then_restart_changes_nothing(broker, setup) -> None:
    app_id, second = _sigkill_mid_stream_and_restart(broker, setup)
    node_writes = _node_writes(broker, app_id)
    assert node_writes, "no noisy node reached the state changelog"
    _assert_each_written_once(node_writes)
    assert second.stop() == 0, second.log_tail()
    # its log is public (no --input-volume-metrics): the recovery of the state it read back
    # is logged without the changelog's highwaters and offsets, which count the input
    recovery = _recovery_lines(second.log_path.read_text(errors="replace"))
    assert any("Highwater" in line for line in recovery), "the restart logged no recovery"
    assert not [line for line in recovery if re.search(r"[0-9]", line)], recovery


def _recovery_lines(log: str) -> list[str]:
    """The lines of Faust's recovery records about changelog positions (a record's first line
    from its message on, then its continuation lines, up to the next record's ``[date]``)."""
    out: list[str] = []
    inside = False
    for line in log.splitlines():
        if line.startswith("["):
            inside = False
            for marker in ("Highwater for", "offsets at start of reading", "remaining"):
                if marker in line:
                    inside = True
                    out.append(line[line.index(marker) :])
                    break
        elif inside:
            out.append(line)
    return out


def test_sigkill_of_a_kary_gls_worker_then_restart_changes_nothing(broker, setup) -> None:
    """The restaurant stream with kary_gls (its epoch noise drawn at the first close, projected
    onto the combo span, stored in chunks): SIGKILL mid-stream and a restart publish only the
    replay's values, and every noise chunk and node is written to the changelog once."""
    app_id, second = _sigkill_mid_stream_and_restart(broker, setup, "kary_gls")
    topic = f"{app_id}-state-changelog"
    changelog = collect(broker, [topic], lambda s: False, timeout=8)[topic]
    noise = {k: v for k, v in changelog.items() if "|noise|restaurant-items|" in k}
    assert noise, "the kary stream's epoch noise never reached the state changelog"
    _assert_each_written_once(noise)
    _assert_each_written_once({k: v for k, v in changelog.items() if "|node|" in k})
    assert second.stop() == 0, second.log_tail()


def test_sigterm_during_a_backlog_exits_cleanly_then_restart_changes_nothing(broker, setup) -> None:
    """A graceful stop while batches are being processed and checkpointed (the batch path has
    one batch in flight while it processes the next): exit status 0, and a restarted worker
    completes the releases exactly as an uninterrupted run, drawing no node twice."""
    make, start = setup
    scenario, config, app_id, T = make(periods=30, rate=2000)
    expected = replay_outputs(scenario, T)
    produce(broker, lines_as_records(scenario))  # a backlog of about 120,000 records
    # input-volume metrics on: this test watches the records read (a protected surface)
    first = start(config, app_id, T, "w1", supervise=False, extra_args=("--input-volume-metrics",))
    first.wait_ready()
    deadline = time.monotonic() + 60
    while _input_records(first) == 0:  # stop as soon as the first batch is through
        assert time.monotonic() < deadline, first.log_tail()
        time.sleep(0.05)
    assert first.stop_where_it_is() == 0, first.log_tail()
    records = lines_as_records(scenario)
    committed = {
        topic: committed_offsets(broker, app_id, topic, range(PARTITIONS))
        for topic in scenario.lines
    }
    processed = sum(offset or 0 for offsets in committed.values() for offset in offsets.values())
    # the precondition, by construction rather than by speed: frozen right after its first
    # batch, the worker's graceful stop finishes at most what it had already fetched (a few
    # batches of at most max_batch records), far below the 120,000-record backlog
    assert processed < len(records), f"the stop came after the backlog was done: {committed}"

    # with offsets in its lines: if it stalls, its dump (conftest.py) says where
    second = start(config, app_id, T, "w2", extra_args=("--input-volume-metrics",))
    # the whole 120,000-record backlog is read again: on the per-event input path (about a
    # tenth of the batch path's speed) that takes minutes on a loaded 2-core machine
    try:
        close_through(broker, scenario, T, app_id, cut=None, partitions=PARTITIONS, timeout=400)
    except AssertionError as error:
        # the second worker's diagnostic dump follows in the report (conftest.py)
        raise AssertionError(
            f"{error}\ncommitted when the first worker stopped: {committed}"
        ) from None
    seen = collect(broker, [T.releases, T.consistent], has_all(expected), timeout=150)
    _values(seen, expected, T)
    _assert_each_written_once(_node_writes(broker, app_id))
    assert second.stop() == 0, second.log_tail()


def test_two_workers_one_leaves_mid_stream(broker, setup) -> None:
    _two_workers_one_leaves_mid_stream(broker, setup)


def _two_workers_one_leaves_mid_stream(broker, setup, unit_key: Path | None = None) -> None:  # type: ignore[no-untyped-def]
    """Two workers share the partitions; after a third of the input and a close, the one that
    owns sources stops; the rest goes to the other: every value is the replay's. With
    ``unit_key``, the hospital streams protect patients (:func:`_protect_patients`)."""
    make, start = setup
    scenario, config, app_id, T = make()
    if unit_key is not None:
        _protect_patients(scenario, config)
    key_args = () if unit_key is None else ("--unit-key-file", str(unit_key))
    a = start(config, app_id, T, "a", extra_args=key_args)
    b = start(config, app_id, T, "b", extra_args=key_args)
    a.wait_ready()
    b.wait_ready()
    third = len(scenario.lines[next(iter(scenario.lines))]) // 3
    expected = replay_outputs(scenario, T, cut=third)
    produce(broker, lines_as_records(scenario, stop=third))
    close_through(broker, scenario, T, app_id, cut=third, partitions=PARTITIONS)
    collect(
        broker,
        [T.releases],
        lambda seen: sum(k in expected[T.releases] for k in seen[T.releases]) > 10,
        timeout=90,
    )
    owners = {w: (w.status() or {}).get("sources_owned", []) for w in (a, b)}
    leaving = a if owners[a] else b
    assert leaving.stop() == 0, leaving.log_tail()
    produce(broker, lines_as_records(scenario, start=third))
    close_through(broker, scenario, T, app_id, cut=None, partitions=PARTITIONS)
    seen = collect(broker, [T.releases, T.consistent], has_all(expected), timeout=150)
    _values(seen, expected, T)


def test_bad_records_reach_the_dead_letter_topic_with_their_reasons(broker, setup) -> None:
    make, start = setup
    scenario, config, app_id, T = make(bad_fraction=0.15, periods=25)
    expected = replay_outputs(scenario, T)
    worker = start(config, app_id, T, "w1")
    worker.wait_ready()
    records = lines_as_records(scenario)
    # plus records keyed by something other than their source: refused before counting
    topic = next(iter(scenario.lines))
    records.append((topic, b"not-the-source", b'{"event_id":"x"}'))
    produce(broker, records)
    close_through(broker, scenario, T, app_id, cut=None, partitions=PARTITIONS)
    want = Counter(
        line.expect for lines in scenario.lines.values() for line in lines if line.expect
    )
    want_total = sum(want.values())
    ours = set(scenario.lines)

    def done(seen):  # type: ignore[no-untyped-def]
        letters = [json.loads(v) for vs in seen[T.dead_letter].values() for v in vs]
        mine = [d for d in letters if d.get("topic") in ours]
        return has_all(expected)(seen) and len({(d["topic"], d["offset"]) for d in mine}) >= (
            want_total + 1
        )

    seen = collect(broker, [T.releases, T.consistent, T.dead_letter], done, timeout=120)
    _values(seen, expected, T)  # every good event counted exactly as in the replay
    letters = {}
    for values in seen[T.dead_letter].values():
        for v in values:
            d = json.loads(v)
            if d.get("topic") in ours:
                letters[(d["topic"], d["offset"], d.get("stream"))] = d["reason"]
    got = Counter(letters.values())
    assert got.pop("wrong_partition_key") == 1
    # a record refused by both streams of the hospital source yields one letter per stream
    by_line = {}
    for (t, offset, _), reason in letters.items():
        by_line.setdefault((t, offset), set()).add(reason)
    for t, lines in scenario.lines.items():
        for offset, line in enumerate(lines):
            if line.expect:
                assert line.expect in by_line.get((t, offset), set()), (t, offset, line.expect)
    assert len(set(want)) >= 9, "fewer than nine kinds of bad input exercised"
    assert worker.stop() == 0


def test_metrics_over_http_show_the_ledgers_epsilon(broker, setup) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    make, start = setup
    scenario, config, app_id, T = make(periods=10)
    worker = start(config, app_id, T, "w1")
    worker.wait_ready()
    produce(broker, lines_as_records(scenario))
    close_through(broker, scenario, T, app_id, cut=None, partitions=PARTITIONS)
    spec = scenario.spec
    # a stream spends its epsilon when its first period closes (monthly HIV: not yet)
    released = {json.loads(v)["stream"] for v in replay_outputs(scenario, T)[T.releases].values()}
    assert released
    want = {n: float(s.epsilon) if n in released else 0.0 for n, s in spec.streams.items()}
    spent: dict[str, float] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and spent != want:
        spent = {}
        for family in text_string_to_metric_families(worker.metrics()):
            if family.name == "streamdp_epsilon_spent":
                for sample in family.samples:
                    spent[sample.labels["stream"]] = sample.value
        time.sleep(0.5)
    assert spent == want
    status = worker.status()
    assert status is not None
    assert status["noise"]["secure"] is False
    assert status["clock"] == scenario.clock
    assert status["delivery_allowance_seconds"] == 5.0  # the default: public, like the clock
    # nothing derived from input volume on /metrics or /status by default
    assert "streamdp_input_records_total" not in worker.metrics()
    assert "batches_processed" not in status
    # Faust's table view would serve raw state over HTTP: it must not exist
    import urllib.error
    import urllib.request

    for path in ("/table/state/restaurant-orders/", "/router/"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{worker.port}{path}", timeout=5)
        assert refused.value.code == 404
        refused.value.close()
    assert worker.stop() == 0


def test_sigusr1_and_sigusr2_log_where_the_worker_waits_and_leave_it_running(broker, setup) -> None:
    """The diagnostic dump (streamdp.daemon.diagnostics): each signal logs the tasks' places and
    every input partition as the stall watchdog sees it, prints no record contents (mode's own
    SIGUSR1 dump printed frames' local variables) and never stops the worker (mode's SIGUSR2
    started pdb)."""
    make, start = setup
    scenario, config, app_id, T = make(periods=6)
    worker = start(config, app_id, T, "w1")
    worker.wait_ready()
    records = lines_as_records(scenario)
    produce(broker, records)
    close_through(broker, scenario, T, app_id, cut=None, partitions=PARTITIONS)
    for signum in (signal.SIGUSR1, signal.SIGUSR2):
        before = worker.log_path.stat().st_size
        worker.process.send_signal(signum)
        deadline = time.monotonic() + 20
        dump = ""
        while "stall clocks" not in dump:
            assert time.monotonic() < deadline, f"no dump after {signum!r}:\n{worker.log_tail()}"
            time.sleep(0.2)
            with worker.log_path.open("rb") as log:
                log.seek(before)
                dump = log.read().decode(errors="replace")
        assert "diagnostic dump" in dump
        assert "ingest" in dump, dump  # the input path's task is among the places shown
        partitions = dump.split("input partitions:\n", 1)[1].splitlines()
        for topic in scenario.lines:
            # every record is durable; without --input-volume-metrics no offset is shown (they
            # count the partition's records), only how they relate
            mine = [line for line in partitions if line.startswith(f"{topic}[")]
            assert len(mine) == PARTITIONS, partitions
            assert all("end known to the client, leader" in line for line in mine), mine
            shape = r"[\w.-]+\[\d\]: \D+ leader \d+ \((not )?connected\)"
            assert all(re.fullmatch(shape, line.strip()) for line in mine), mine
        assert not any(value.decode() in dump for _, _, value in records[:200])
        assert "Starting debugger" not in dump  # mode's SIGUSR2 handler
        assert worker.process.poll() is None
        status = worker.status()
        assert status is not None
        assert status["ready"]
    assert worker.stop() == 0


def _injected_worker_exits_75(
    start: Any, config: Path, app_id: str, T: Any, script: str, env: dict[str, str], **kw: Any
) -> tuple[str, str]:
    """Run ``tests/<script>`` (the real worker with one fault injected) unsupervised until it
    exits, which must be with 75 within 180 s; its log and its exit line."""
    injected = start(
        config,
        app_id,
        T,
        script.removesuffix("_worker.py"),
        supervise=False,
        program=(str(Path(__file__).with_name(script)),),
        env=env,
        **kw,
    )
    try:
        status = injected.process.wait(timeout=180)
    except subprocess.TimeoutExpired:
        raise AssertionError("still running after 180 s (its dump follows)") from None
    assert injected.stop() == status  # closes its log
    log = injected.log_path.read_text(errors="replace")
    assert status == EXIT_INPUT_GAP, log[-3000:]
    exits = [line for line in log.splitlines() if "exiting to restart" in line]
    assert exits, log[-3000:]
    return log, exits[0]


def _a_replacement_publishes_the_replay(
    broker: Any, start: Any, scenario: Any, config: Path, app_id: str, T: Any, expected: Any
) -> None:
    """After the group session timeout, a plain worker completes the input and publishes
    exactly the replay's releases, drawing no node twice."""
    time.sleep(Worker.RESTART_DELAY)  # a supervisor waits out the group session timeout
    second = start(config, app_id, T, "w2")
    close_through(broker, scenario, T, app_id, cut=None, partitions=PARTITIONS)
    seen = collect(broker, [T.releases, T.consistent], has_all(expected), timeout=150)
    _values(seen, expected, T)
    _assert_each_written_once(_node_writes(broker, app_id))
    assert second.stop() == 0, second.log_tail()


def test_commits_the_broker_never_took_end_the_worker_with_75(broker, setup) -> None:
    """A worker whose commits of one topic stop reaching the broker while faust-streaming
    believes they did (tests/losing_commits_worker.py; seen once in CI, cause unknown) would
    sit ready for ever with its partition's lag never falling. The commit check asks the broker
    for its committed offsets: the worker exits 75 after ``--stall-exit``, naming the
    divergence, and its replacement resumes from the broker's offset and publishes exactly the
    replay's releases, drawing no node twice."""
    make, start = setup
    scenario, config, app_id, T = make()
    expected = replay_outputs(scenario, T)
    produce(broker, lines_as_records(scenario))
    lost = next(topic for topic in scenario.lines if topic.startswith("orders"))
    log, line = _injected_worker_exits_75(
        start,
        config,
        app_id,
        T,
        "losing_commits_worker.py",
        {"LOSE_COMMITS": lost},
        extra_args=("--input-volume-metrics",),  # exit lines name offsets
    )
    assert lost in line, line
    assert "faust-streaming's record of its commits is further" in line, line
    assert "the broker's committed offset is behind faust-streaming's record" in log
    _a_replacement_publishes_the_replay(broker, start, scenario, config, app_id, T, expected)


def test_an_input_topic_the_client_never_fetches_ends_the_worker_with_75(broker, setup) -> None:
    """A partition no fetch has answered for has no end offset in the client's view; the stall
    watchdog asks the broker for it, so a worker whose client never fetches a topic
    (tests/unfetching_worker.py) exits 75 after ``--stall-exit`` instead of waiting silently for
    ever, and its replacement publishes exactly the replay's releases."""
    make, start = setup
    scenario, config, app_id, T = make()
    expected = replay_outputs(scenario, T)
    produce(broker, lines_as_records(scenario))
    never = next(topic for topic in scenario.lines if topic.startswith("orders"))
    _, line = _injected_worker_exits_75(
        start, config, app_id, T, "unfetching_worker.py", {"NEVER_FETCH": never}
    )
    assert never in line, line
    assert "none fetched" in line, line
    _a_replacement_publishes_the_replay(broker, start, scenario, config, app_id, T, expected)


def _hospital_as_zcdp(text: str, census_mechanism: str) -> str:
    """The scenario's hospital half under rho-zCDP: its source caps rho, the census stream runs
    ``census_mechanism`` (kary_gls or blt: projected onto the hierarchy at publication), the
    HIV stream the binary tree."""
    restaurant, hospital = text.split("[sources.hospital-admissions]", 1)
    hospital = hospital.replace("epsilon_cap = 1.0", "rho_cap = 1.0", 1)
    census, hiv = hospital.split("[streams.hiv-admissions]", 1)
    census = census.replace(
        "epsilon = 0.5",
        f'privacy = {{ definition = "zcdp", rho = 0.5 }}\nmechanism = "{census_mechanism}"',
        1,
    )
    hiv = hiv.replace(
        "epsilon = 0.5", 'privacy = { definition = "zcdp", rho = 0.5 }\nmechanism = "binary"', 1
    )
    return f"{restaurant}[sources.hospital-admissions]{census}[streams.hiv-admissions]{hiv}"


def _hospital_per_patient(text: str) -> str:
    """The scenario's hospital streams protecting patients, with the bounds of
    streamdp/examples/hospital_patients.toml."""
    restaurant, hospital = text.split("[sources.hospital-admissions]", 1)
    census, hiv = hospital.split("[streams.hiv-admissions]", 1)
    census = census.replace(
        "sensitivity = 5",
        'sensitivity = 5\nprivacy_unit = { field = "patient_id", max_events_per_period = 1, '
        "max_periods_per_epoch = 12 }",
        1,
    )
    hiv = hiv.replace(
        "sensitivity = 1",
        'sensitivity = 1\nprivacy_unit = { field = "patient_id", max_events_per_period = 2, '
        "max_periods_per_epoch = 6 }",
        1,
    )
    return f"{restaurant}[sources.hospital-admissions]{census}[streams.hiv-admissions]{hiv}"


def _protect_patients(scenario: Scenario, config: Path) -> None:
    """The hospital streams protect patients (:func:`_hospital_per_patient`), and the
    admissions come from 9 patients in turn, so the bounds drop most of them: a worker that
    lost or doubled a patient's counts would admit a different set of records."""
    scenario.spec_text = _hospital_per_patient(scenario.spec_text)
    config.write_text(scenario.spec_text)
    topic = scenario.spec.sources["hospital-admissions"].topic
    patients = []
    for i, line in enumerate(scenario.lines[topic]):
        event = json.loads(line.text)  # every line is a good event (no bad fraction)
        event["patient_id"] = f"patient-{i % 9:03d}"
        patients.append(Line(json.dumps(event), line.expect, line.period))
    scenario.lines[topic] = patients


def _unit_key_file(directory: Path) -> Path:
    """A worker's secret for the patients' keyed digests (not the replay's key: whether a
    record counts never depends on the key)."""
    key = directory / "unit.key"
    key.write_text("a worker's own secret, 32 bytes+\n")
    return key


def test_a_patient_level_stream_runs_in_the_worker_and_equals_its_replay(
    broker, setup, tmp_path: Path
) -> None:
    """Issue 28: the hospital streams protecting patients (admissions of 9 patients, so the
    bounds drop most of them) run in the worker with its own --unit-key-file and publish
    exactly the replay's records (admission never depends on the key), which carry the unit
    and its sensitivity; /status says per what the budget holds; the patients' identifiers
    never reach a public topic."""
    make, start = setup
    scenario, config, app_id, T = make(periods=20)
    _protect_patients(scenario, config)
    key = _unit_key_file(tmp_path)
    worker = start(config, app_id, T, "w1", extra_args=("--unit-key-file", str(key)))
    worker.wait_ready()
    produce(broker, lines_as_records(scenario))
    close_through(broker, scenario, T, app_id, cut=None, partitions=PARTITIONS)
    expected = replay_outputs(scenario, T)
    seen = collect(broker, [T.releases, T.consistent], has_all(expected), timeout=120)
    _values(seen, expected, T)
    census = [json.loads(v) for v in expected[T.releases].values() if '"admissions-census"' in v]
    assert census
    assert {r["sensitivity"] for r in census} == {60}
    assert {r["privacy_unit"]["field"] for r in census} == {"patient_id"}
    published = json.dumps(seen)
    assert "patient-00" not in published
    status = worker.status()
    assert status is not None
    assert status["streams"]["admissions-census"]["protects"] == "patient_id per epoch"
    assert status["streams"]["hiv-admissions"]["sensitivity"] == 12
    assert worker.stop() == 0, worker.log_tail()


def test_sigkill_of_a_patient_level_worker_then_restart_keeps_every_patients_counts(
    broker, setup, tmp_path: Path
) -> None:
    """Issue 28 on the real path: the patients' counts (keyed digests in the state table) are
    restored with the offsets they were checkpointed with. The bounds bind on both sides of
    the kill, so a restart that lost a patient's periods would admit records the replay drops
    (or, replaying the input twice, count a patient's records twice) and publish other
    values."""
    app_id, second = _sigkill_mid_stream_and_restart(
        broker, setup, unit_key=_unit_key_file(tmp_path)
    )
    _assert_each_written_once(_node_writes(broker, app_id))
    assert second.stop() == 0, second.log_tail()


def test_two_patient_level_workers_one_leaves_mid_stream(broker, setup, tmp_path: Path) -> None:
    """Issue 28: a rebalance moves the patients' counts with the partitions they belong to;
    the worker that takes over admits exactly the records the replay admits."""
    _two_workers_one_leaves_mid_stream(broker, setup, unit_key=_unit_key_file(tmp_path))


@pytest.mark.parametrize("census_mechanism", ["kary_gls", "blt"])
def test_zcdp_streams_run_in_the_worker_and_equal_their_replay(
    broker, setup, census_mechanism: str
) -> None:
    """Issue 27: a census stream (kary_gls, or the lattice BLT with its O(buffers) state) and
    a flag stream (binary tree) under zCDP beside the restaurant's pure-DP stream: the worker
    publishes exactly the replay's records, which say rho and the discrete Gaussian, and
    /metrics shows the rho its ledger recorded."""
    make, start = setup
    scenario, config, app_id, T = make(periods=20)
    scenario.spec_text = _hospital_as_zcdp(scenario.spec_text, census_mechanism)
    config.write_text(scenario.spec_text)
    assert scenario.spec.streams["admissions-census"].definition == "zcdp"
    assert scenario.spec.sources["hospital-admissions"].definition == "zcdp"
    worker = start(config, app_id, T, "w1")
    worker.wait_ready()
    produce(broker, lines_as_records(scenario))
    close_through(broker, scenario, T, app_id, cut=None, partitions=PARTITIONS)
    expected = replay_outputs(scenario, T)
    seen = collect(broker, [T.releases, T.consistent], has_all(expected), timeout=120)
    _values(seen, expected, T)
    census = [json.loads(v) for v in expected[T.releases].values() if '"admissions-census"' in v]
    assert census
    assert all(r["privacy_definition"] == "zcdp" and r["rho"] == 0.5 for r in census)
    assert {r["mechanism"] for r in census} == {census_mechanism}
    assert {r["noise"] for r in census} == {"insecure-seeded-numpy-gaussian"}
    rho: dict[str, float] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and rho.get("hospital-admissions") != 0.5:
        for family in text_string_to_metric_families(worker.metrics()):
            if family.name == "streamdp_source_rho_spent":
                rho = {s.labels["source"]: s.value for s in family.samples}
        time.sleep(0.5)
    assert rho == {"hospital-admissions": 0.5}  # the census stream's; HIV not released yet
    status = worker.status()
    assert status is not None
    assert status["streams"]["admissions-census"]["privacy_definition"] == "zcdp"
    assert status["streams"]["admissions-census"]["rho_per_epoch"] == "0.5"
    assert worker.stop() == 0, worker.log_tail()
