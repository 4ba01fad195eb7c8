"""The live quick start (issue 26): ``streamdp produce --write-spec`` writes an example spec
whose periods start now, and ``streamdp produce`` sends synthetic events stamped with the
moment they are sent; a worker on the wall clock counts them and releases every period on
schedule, nothing late. And on the real path: a record is judged at its own Kafka timestamp
(checked to fail when the worker judges at receipt)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from daemon_harness import Worker, collect

from streamdp.cli import main
from streamdp.daemon.routing import OutputTopics
from streamdp.daemon.settings import DaemonSettings
from streamdp.daemon.topology import required_topics
from streamdp.engine import EngineSpec, load_spec, parse_spec
from streamdp.engine.periods import PeriodClock, parse_instant
from streamdp.synth import SCENARIOS, example_spec
from streamdp.synth.generators import EXAMPLE_FILES
from streamdp.synth.live import live_events, live_spec_text, stamped

EXAMPLES = Path(__file__).resolve().parents[1] / "streamdp" / "examples"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_live_spec_has_short_periods_from_now_and_the_examples_streams(scenario: str) -> None:
    now = 1_790_000_123.4
    example_text = (EXAMPLES / EXAMPLE_FILES[scenario]).read_text("utf-8")
    text = live_spec_text(example_text, 60, now, examples_dir=EXAMPLES)
    live, example = parse_spec(text), example_spec(scenario)
    assert live.streams.keys() == example.streams.keys()
    assert live.sources == example.sources
    for name, stream in live.streams.items():
        start, end = PeriodClock(stream.period).bounds(0)
        assert (start, end) == (1_790_000_100.0, 1_790_000_160.0)
        assert stream.allowed_lateness_seconds == 6.0
        assert stream.counters == example.streams[name].counters
        assert stream.epsilon == example.streams[name].epsilon


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_write_spec_writes_every_scenario_in_the_words_of_its_periods(
    scenario: str, tmp_path: Path
) -> None:
    """Every scenario's example is found (two have files named with an underscore), and the
    written spec's titles, descriptions and comments no longer speak of days or months."""
    target = tmp_path / "live.toml"
    argv = ["produce", "--scenario", scenario, "--write-spec", str(target)]
    assert main([*argv, "--period-seconds", "90"]) == 0
    spec = load_spec(target)
    assert spec.streams.keys() == example_spec(scenario).streams.keys()
    words = [line for line in target.read_text("utf-8").splitlines() if line.startswith("#")]
    for stream in spec.streams.values():
        words += [stream.about.title or "", stream.about.description or ""]
    calendar = re.compile(r"\b(day|days|daily|month|months|monthly|year|years|yearly)\b", re.I)
    assert [w for w in words if calendar.search(w)] == []
    assert any("per period of 90 s" in w for w in words)


def test_live_events_are_valid_new_and_stamped_with_the_moment_they_are_sent() -> None:
    spec = example_spec("restaurant")
    events = live_events("restaurant", spec, seed=3, bad_fraction=0.0)
    ids = set()
    for _, event in zip(range(200), events, strict=False):
        body = json.loads(stamped(event, 1_790_000_000.5))
        assert parse_instant(body["event_time"]) == 1_790_000_000.5
        assert event.key == b"restaurant-orders"
        assert event.topic == "restaurant-orders"
        ids.add(body["event_id"])
    assert len(ids) == 200


def test_produce_refuses_to_send_without_a_broker_and_names_the_missing_flags() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streamdp", "produce", "--scenario", "hiv"],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--config and --bootstrap are required" in done.stderr


def _live_hiv_worker(
    broker: Any, unique_name: Any, tmp_path: Path, prefix: str, **worker_options: Any
) -> tuple[Path, EngineSpec, OutputTopics, str, Worker]:
    """A wall-clock worker (not yet ready) on the spec ``streamdp produce --write-spec`` writes
    for the hiv scenario (5-s periods from now), reading its own input topic (the broker is
    shared with other tests), its topics created. Returns the spec's path, the spec, the
    output topics, the input topic and the worker."""
    spec_path = tmp_path / "live.toml"
    subprocess.run(
        [sys.executable, "-m", "streamdp", "produce", "--scenario", "hiv",
         "--write-spec", str(spec_path), "--period-seconds", "5"],
        check=True, timeout=60,
    )  # fmt: skip
    namespace, app_id = unique_name(prefix), unique_name(f"{prefix}-app")
    topic = unique_name("hiv")
    text = spec_path.read_text("utf-8").replace('topic = "admissions"', f'topic = "{topic}"')
    spec_path.write_text(text, encoding="utf-8")
    spec = load_spec(str(spec_path))
    assert spec.sources["admissions"].topic == topic
    outputs = OutputTopics.in_namespace(namespace)
    settings = DaemonSettings(
        config=spec_path, bootstrap=broker.bootstrap, partitions=1, app_id=app_id, topics=outputs
    )
    broker.create_topics(required_topics(spec, settings))
    worker = Worker(
        broker, spec_path, app_id=app_id, partitions=1, data_dir=tmp_path / "data",
        log_path=tmp_path / "worker.log", namespace=namespace, **worker_options,
    )  # fmt: skip
    return spec_path, spec, outputs, topic, worker


@pytest.mark.slow
def test_a_wall_clock_worker_releases_what_produce_sends_period_by_period(
    broker: Any, unique_name: Any, tmp_path: Path
) -> None:
    spec_path, spec, outputs, topic, worker = _live_hiv_worker(
        broker, unique_name, tmp_path, "live"
    )
    try:
        worker.wait_ready()
        started = time.time()
        subprocess.run(
            [sys.executable, "-m", "streamdp", "produce", "--scenario", "hiv", "--config",
             str(spec_path), "--bootstrap", broker.bootstrap, "--per-second", "20",
             "--duration", "16"],
            check=True, timeout=120,
        )  # fmt: skip
        stream = next(iter(spec.streams.values()))
        clock = PeriodClock(stream.period)
        first = clock.index_of(started)
        last = clock.index_of(time.time()) - 1  # periods wholly inside the run: first+1..last
        counter = stream.counters.names[0]
        # 16 s of sending spans at least three 5-s periods, two of them whole
        wanted = {f"{stream.name}|{counter}|0|{j + 1}": j for j in range(first + 1, last + 1)}
        assert len(wanted) >= 2
        seen = collect(
            broker,
            [outputs.releases, outputs.dead_letter, topic],
            lambda s: wanted.keys() <= set(s[outputs.releases]),
            timeout=60,
        )
        assert wanted.keys() <= set(seen[outputs.releases]), (wanted, worker.log_tail())
        late = [v for vs in seen[outputs.dead_letter].values() for v in vs if '"late"' in v]
        assert late == [], late[:3]
        # every event sent was counted in the period of the moment it was sent
        exact = dict.fromkeys(wanted.values(), 0)
        for value in seen[topic]["admissions"]:
            event = json.loads(value)
            j = clock.index_of(parse_instant(event["event_time"]) or 0.0)
            if j in exact and event["attributes"]["hiv_positive"]:
                exact[j] += 1
        assert sum(exact.values()) > 0
        for key, j in wanted.items():
            (release,) = {
                json.loads(v)["noisy_count"]: json.loads(v) for v in seen[outputs.releases][key]
            }.values()
            assert abs(release["noisy_count"] - exact[j]) <= 6 * release["count_std"], (j, release)
    finally:
        worker.stop()


@pytest.mark.parametrize("input_path", ["batch", "stream"])
def test_a_record_counts_by_its_kafka_timestamp_not_by_when_it_arrives(
    broker: Any, unique_name: Any, tmp_path: Path, input_path: str
) -> None:
    """A wall-clock worker with a 4 s delivery allowance, on both input paths. After a
    period's close instant, two records of that period reach it: one whose Kafka timestamp
    says it was sent a second before the close (delayed on its way) counts; one sent now is
    late. The period's releases carry its close instant plus the allowance."""
    _, spec, outputs, topic, worker = _live_hiv_worker(
        broker, unique_name, tmp_path, "sent",
        input_path=input_path, extra_args=("--delivery-allowance", "4"),
    )  # fmt: skip
    try:
        worker.wait_ready()
        stream = next(iter(spec.streams.values()))
        clock = PeriodClock(stream.period)
        j = clock.index_of(time.time()) + 1  # the next period: the worker is surely up
        start, end = clock.bounds(j)
        close = end + stream.allowed_lateness_seconds
        time.sleep(max(0.0, close + 0.5 - time.time()))
        events = live_events("hiv", spec, seed=9, bad_fraction=0.0)
        delayed, fresh = next(events), next(events)
        delayed_id = json.loads(delayed.value)["event_id"]
        fresh_id = json.loads(fresh.value)["event_id"]

        async def send() -> None:
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
            await producer.start()
            try:
                sent_before = round((close - 1.0) * 1000)
                await producer.send_and_wait(
                    topic, stamped(delayed, start + 1.0), key=delayed.key, timestamp_ms=sent_before
                )
                await producer.send_and_wait(topic, stamped(fresh, start + 1.0), key=fresh.key)
            finally:
                await producer.stop()

        asyncio.run(send())
        assert time.time() < close + 4.0, "sent after the release: the check proves nothing"
        counter = stream.counters.names[0]
        key = f"{stream.name}|{counter}|0|{j + 1}"
        stamps: dict[str, list[int]] = {}
        seen = collect(
            broker,
            [outputs.releases, outputs.dead_letter],
            lambda s: key in s[outputs.releases] and bool(s[outputs.dead_letter]),
            timeout=60,
            timestamps=stamps,
        )
        assert key in seen[outputs.releases], worker.log_tail()
        letters = [json.loads(v) for vs in seen[outputs.dead_letter].values() for v in vs]
        assert [(d["event_id"], d["reason"]) for d in letters] == [(fresh_id, "late")]
        assert delayed_id not in json.dumps(letters)
        released_at = (close + 4.0) * 1000
        assert any(abs(t - released_at) <= 1 for t in stamps[outputs.releases]), (
            released_at,
            sorted(set(stamps[outputs.releases])),
        )
    finally:
        worker.stop()
