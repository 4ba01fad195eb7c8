"""Daemon throughput (events/s per worker) and period-close latency, on the embedded broker.

One run, repeated ``--runs`` times (each on a fresh Tansu broker, 127.0.0.1):

1. pre-produce M restaurant events (``--periods`` days x ``--rate`` orders a day, keyed by the
   source) to the input topic;
2. baseline: a bare aiokafka consumer reads the same M records and JSON-decodes each value (the
   least any consumer of these records does), timed from its first record to its last
   (``benchmarks/bare_consumer.py`` if present, else the same loop here). It is measured twice,
   just before the worker starts and just after the worker has caught up, and the daemon is
   compared with the mean of the two: on a shared machine the speed drifts within a run;
3. daemon: one ``streamdp worker`` subprocess starts on the backlog, on a public clock frozen
   after the produced days (``--clock frozen:...``; the spec's lateness keeps every period open,
   so every record counts and nothing closes by itself). Throughput = (M - n0) / (t_n - t0),
   where (t0, n0) is the first poll of its ``/metrics`` (every 50 ms, input-volume metrics on)
   showing ``streamdp_input_records_total`` > 0 and t_n the first poll showing all M: a record
   is counted there once its batch's checkpoint and outputs are durable. Startup and group join
   are excluded. Then one operator close record (control topic) releases the M records' days,
   and every release is read back. Worker CPU seconds (/proc) are reported too: on a shared
   machine events per CPU-second is the steadier figure; and the seconds the worker's threads
   were runnable but waiting for a CPU (run-queue delay, /proc/<pid>/task/*/schedstat), which
   with its CPU seconds tells a busy worker from one waiting for records or acknowledgements;
4. period-close latency, worker caught up: for each of ``--latency-days`` more days (inside the
   frozen clock), a producer sends 20 orders (send-and-wait each), waits until the worker has
   committed them, then sends the operator's close record for that day; latency = time from just
   before that send to the moment our consumer (fetch_max_wait 10 ms) has seen all 5 counters'
   releases of the day. This is the pipeline's latency (control record read, close, checkpoint,
   publication, read back); since issue 25 it includes the wait for the worker's next heartbeat
   tick (up to ``--tick``, 0.5 s), which alone makes an operator's close. A period closed by
   the clock is released at its close instant, with no such wait.

Configurations: the worker's defaults (the per-fetch batch input path, 0.1 s fetch long-poll),
``--input-path stream`` (records through a Faust agent one event at a time, the same checkpoint
protocol) and ``--fetch-wait 1.5`` (the batch path with Faust's own 1.5 s fetch long-poll; see
streamdp/faust_internals.py).

The spec is examples/restaurant.toml with ten years of lateness, UTC days and a long horizon (see
SPEC): on the frozen clock every period stays open until the operator closes it.

    .venv/bin/python benchmarks/daemon_throughput.py [--runs 5] [--periods 100 --rate 2000]
    .venv/bin/python benchmarks/daemon_throughput.py --profile   # cProfile of one worker run
    .venv/bin/python benchmarks/daemon_throughput.py --from-json  # re-render results/daemon.json

    .venv/bin/python benchmarks/daemon_throughput.py --engine kafka  # on Apache Kafka (one node)

Writes daemon.json, daemon.md and daemon.png to benchmarks/out/ (with --write: the committed
benchmarks/results/; ``--from-json`` reads the committed benchmarks/results/daemon.json and
writes only the .md and .png). ``--engine kafka``: daemon_kafka.json, .md, .png; the broker is
then a fresh single-node Apache Kafka 4.4.0 per run, started by streamdp.broker.KafkaBroker.
Shared 2-core machine: compare the ratio to the bare consumer measured in the same run, not
absolute numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families
from results_dir import COMMITTED, add_write_flag, output_dir
from run_conditions import conditions_at_start, conditions_text, finish

from streamdp.broker import EmbeddedBroker, KafkaBroker, free_loopback_port
from streamdp.daemon.routing import InputRecord
from streamdp.daemon.service import ReleaseService
from streamdp.daemon.settings import DaemonSettings
from streamdp.daemon.topology import required_topics
from streamdp.demo.worker import die_with_parent
from streamdp.engine import Engine, parse_spec
from streamdp.engine.periods import PeriodClock, format_instant
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import generate

HERE = Path(__file__).resolve().parent
TOPIC = "restaurant-orders"
CONTROL = "streamdp.control"
SOURCE_KEY = b"restaurant-orders"
COUNTERS = ("cola", "burger", "wings", "fries", "nuggets")
COMBO = {"cola": 2, "burger": 1, "wings": 1, "nuggets": 1}
TARGET = 50_000.0
SPEC = """
[sources.restaurant-orders]
topic = "restaurant-orders"
kind = "order"
epsilon_cap = 1.0

[streams.restaurant-items]
source = "restaurant-orders"
epsilon = 1.0
sensitivity = 5
horizon = 4096
mechanism = "fda"
objective = "total"
allowed_lateness = "3650d"
on_epoch_end = "roll"
max_future_periods = 0
period = { unit = "day", timezone = "UTC", start = "2024-01-01" }
counters = { kind = "items", items = ["cola", "burger", "wings", "fries", "nuggets"] }
consistency = { every_periods = 7, at_epoch_end = true }

[streams.restaurant-items.constraints]
kind = "combos"
orders_must_be_combos = true

[streams.restaurant-items.constraints.combos]
combo1 = { cola = 2, burger = 1, wings = 1, nuggets = 1 }
combo2 = { burger = 2, wings = 2, fries = 1 }
combo3 = { cola = 1, burger = 1, fries = 1, nuggets = 1 }
"""


# ---------------------------------------------------------------------------------- baseline
async def _bare_consumer_here(bootstrap: str, topic: str, n_events: int) -> float:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        # like the daemon's figure: from the arrival of the first batch (not counted) to the last
        n, n0, t0 = 0, 0, 0.0
        while n < n_events:
            batches = await consumer.getmany(timeout_ms=1000)
            got = sum(len(m) for m in batches.values())
            if got and n == 0:
                t0, n0 = time.perf_counter(), got
            n += got
        return (n - n0) / (time.perf_counter() - t0)
    finally:
        await consumer.stop()


def _bare_consumer_module() -> Any | None:
    """``benchmarks/bare_consumer.py`` loaded as a module, if it is there."""
    path = HERE / "bare_consumer.py"
    if not path.is_file():
        return None
    module_spec = importlib.util.spec_from_file_location("bare_consumer", path)
    if module_spec is None or module_spec.loader is None:
        return None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def bare_consumer() -> tuple[str, Callable[[str, str, int], Awaitable[float]]]:
    """The baseline: the broker engineer's ``measure_bare_consumer`` if present, else ours."""
    module = _bare_consumer_module()
    measure = getattr(module, "measure_bare_consumer", None)
    if measure is not None:
        if asyncio.iscoroutinefunction(measure):
            return "benchmarks/bare_consumer.py", measure

        async def wrapped(bootstrap: str, topic: str, n: int) -> float:
            result = await asyncio.to_thread(measure, bootstrap, topic, n)
            return float(getattr(result, "events_per_second", result))

        return "benchmarks/bare_consumer.py", wrapped
    return "aiokafka getmany loop (this file)", _bare_consumer_here


def bare_consumer_orjson() -> Callable[[str, str, int], Awaitable[float]]:
    """The same bare consumer decoding with orjson: the baseline for a worker whose decoder
    reads with orjson first (``streamdp.engine.events.decode``)."""
    import orjson

    module = _bare_consumer_module()
    if module is None:
        raise RuntimeError(f"cannot load {HERE / 'bare_consumer.py'}")

    async def measure(bootstrap: str, topic: str, n: int) -> float:
        rate = await asyncio.to_thread(
            module.measure_bare_consumer, bootstrap, topic, n, decoder=orjson.loads
        )
        return float(rate)

    return measure


# ---------------------------------------------------------------------------------- in-process
def service_only(
    values: list[bytes], max_batch: int, repeats: int = 3
) -> tuple[float, float, float]:
    """events/s of the release service alone (engine + checkpoint records, no Kafka, no Faust)
    over the same records in batches of ``max_batch`` (one run each, as one partition's fetch
    reaches the worker), of the bare engine (``Engine.consume``), and of the bare engine on its
    Python path only (``native_scan=False``: what a worker installed without a C compiler runs).
    Medians of ``repeats``: where the daemon's time goes, in the same run."""
    spec = parse_spec(SPEC, origin="bench")
    service_times, engine_times, python_times = [], [], []
    for _ in range(repeats):
        service = ReleaseService(
            spec, sampler=InsecureSeededSampler(1), state={}, clock=lambda: 1704067200.0
        )
        records = [
            InputRecord(TOPIC, 0, offset, SOURCE_KEY, value) for offset, value in enumerate(values)
        ]
        t0 = time.perf_counter()
        for i in range(0, len(records), max_batch):
            service.process_runs([records[i : i + max_batch]])
        service_times.append(time.perf_counter() - t0)
        engine = Engine(spec, sampler=InsecureSeededSampler(1))
        t0 = time.perf_counter()
        out: list[Any] = []
        for offset, value in enumerate(values):
            engine.consume(value, TOPIC, 0, offset, out, True)
        engine_times.append(time.perf_counter() - t0)
        engine = Engine(spec, sampler=InsecureSeededSampler(1), native_scan=False)
        t0 = time.perf_counter()
        for offset, value in enumerate(values):
            engine.consume(value, TOPIC, 0, offset, out, True)
        python_times.append(time.perf_counter() - t0)
    n = len(values)
    return (
        n / statistics.median(service_times),
        n / statistics.median(engine_times),
        n / statistics.median(python_times),
    )


# ---------------------------------------------------------------------------------- helpers
async def produce(
    bootstrap: str, values: list[bytes], topic: str = TOPIC, key: bytes = SOURCE_KEY
) -> float:
    """Send ``values`` to ``topic`` keyed ``key`` (the source's name); returns records/s."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=256 * 1024
    )
    await producer.start()
    t0 = time.perf_counter()
    try:
        pending = []
        for value in values:
            pending.append(await producer.send(topic, value, key=key))
            if len(pending) >= 5000:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return len(values) / (time.perf_counter() - t0)


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return str(response.read().decode())
    except OSError:
        return None


def input_records(port: int) -> float | None:
    text = _get(f"http://127.0.0.1:{port}/metrics")
    if text is None:
        return None
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "streamdp_input_records_total":
                total += sample.value
    return total


def close_histogram(port: int) -> tuple[float, float]:
    """(sum, count) of the worker's ``streamdp_period_close_latency_seconds`` histogram: from
    receipt of the batch that closed a period to the broker's acknowledgement of its releases."""
    text = _get(f"http://127.0.0.1:{port}/metrics") or ""
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "streamdp_period_close_latency_seconds_sum":
                total += sample.value
            elif sample.name == "streamdp_period_close_latency_seconds_count":
                count += sample.value
    return total, count


def broker_cpu_seconds(broker: Any) -> float:
    """CPU seconds of the broker's process so far (NaN where unknown: Tansu)."""
    pid = broker.node_pid(0) if hasattr(broker, "node_pid") else None
    return cpu_seconds(pid) if pid else float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_wait_seconds(pid: int) -> float:
    """Seconds the threads of ``pid`` have spent runnable but waiting for a CPU (the run-queue
    delay of /proc/<pid>/task/*/schedstat; NaN where the kernel does not keep it)."""
    total = 0
    tasks = list(Path(f"/proc/{pid}/task").glob("*/schedstat"))
    for task in tasks:
        try:
            total += int(task.read_text().split()[1])
        except (OSError, IndexError, ValueError):  # a thread that ended meanwhile
            continue
    return total / 1e9 if tasks else float("nan")


@dataclass
class RunResult:
    config: str
    events: int
    bare_eps: float  # the bare consumer just before the worker started
    daemon_eps: float
    worker_cpu: float
    releases: int
    latencies: list[float] = field(default_factory=list)
    inside_mean: float = float("nan")
    bare_after: float = float("nan")  # ... and just after it caught up
    # CPU us per event of the bare consumer (its whole read, in this process) and of the
    # broker while the worker read (Apache Kafka only: the JVM's process)
    bare_cpu_us: float = float("nan")
    broker_cpu_us: float = float("nan")
    # the bare consumer decoding with orjson, as the worker's fast path does (after the run)
    bare_orjson: float = float("nan")
    # the throughput window (t0 to t_n) and the worker's seconds in it runnable but waiting
    # for a CPU (busy: CPU + wait = window; idle: less)
    window: float = float("nan")
    worker_cpu_wait: float = float("nan")
    # from each day's release timestamp (its tick's scheduled instant: what a period closed on
    # the clock carries) to all its releases read; empty in results stored before it
    publication_latencies: list[float] = field(default_factory=list)

    @property
    def baseline(self) -> float:
        """The bare consumer's rate around the daemon's run (mean of before and after)."""
        if self.bare_after != self.bare_after:  # NaN: results of a single measurement
            return self.bare_eps
        return (self.bare_eps + self.bare_after) / 2

    @property
    def ratio(self) -> float:
        return self.daemon_eps / self.baseline

    @property
    def ratio_orjson(self) -> float:
        """Against the bare consumer that decodes with orjson too (the stricter baseline)."""
        return self.daemon_eps / self.bare_orjson


async def read_releases(bootstrap: str, expected_min: int) -> tuple[int, float]:
    """Count release records and return the newest timestamp (seconds) on streamdp.releases."""
    consumer = AIOKafkaConsumer(
        "streamdp.releases",
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        n, newest, idle = 0, 0.0, 0
        deadline = time.monotonic() + 120
        while (idle < 3 or n < expected_min) and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            got = sum(len(m) for m in batches.values())
            idle = 0 if got else idle + 1
            for messages in batches.values():
                for message in messages:
                    n += 1
                    newest = max(newest, message.timestamp / 1000.0)
        return n, newest
    finally:
        await consumer.stop()


async def send_close(producer: AIOKafkaProducer, through: float) -> None:
    """The operator's close record for the stream, on the control topic, keyed by the source."""
    close = {
        "type": "control",
        "action": "close",
        "stream": "restaurant-items",
        "through": format_instant(through),
    }
    await producer.send_and_wait(CONTROL, json.dumps(close).encode(), key=SOURCE_KEY)


async def close_all(bootstrap: str, through: float) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    try:
        await send_close(producer, through)
    finally:
        await producer.stop()


async def close_latency(
    bootstrap: str, port: int, first_day: int, days: int, clock: PeriodClock, consumed: float
) -> tuple[list[float], list[float]]:
    """Period-close latencies (s) for ``days`` days starting at absolute period ``first_day``:
    each day's orders are sent and consumed first, then the close record; latency runs from
    that send to all the day's releases read. Also the publication latencies: from the day's
    release timestamp (the tick's scheduled instant, wall clock) to all its releases read, the
    latency of a period closed on the clock. ``consumed``: input records counted so far."""
    consumer = AIOKafkaConsumer(
        "streamdp.releases",
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="latest",
        enable_auto_commit=False,
        fetch_max_wait_ms=10,
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await consumer.start()
    await producer.start()
    seen: dict[str, set[str]] = {}
    arrived: dict[str, float] = {}
    stamped: dict[str, float] = {}  # the day's releases' timestamp (s)
    published: dict[str, float] = {}  # wall time when all were read

    async def watch() -> None:
        while True:
            batches = await consumer.getmany(timeout_ms=50)
            now, wall = time.perf_counter(), time.time()
            for messages in batches.values():
                for message in messages:
                    record = json.loads(message.value)
                    start = record["period_start"][:10]
                    seen.setdefault(start, set()).add(record["counter"])
                    stamped[start] = max(stamped.get(start, 0.0), message.timestamp / 1000.0)
                    if len(seen[start]) == len(COUNTERS) and start not in arrived:
                        arrived[start] = now
                        published[start] = wall

    watcher = asyncio.create_task(watch())
    await asyncio.sleep(1.0)  # let the consumer settle on the end of the topic
    sent_at: dict[str, float] = {}
    number = 0
    try:
        for day in range(first_day, first_day + days):
            lo, hi = clock.bounds(day)
            for k in range(20):
                number += 1
                event = {
                    "event_id": f"latency-{number}",
                    "event_time": format_instant(lo + (k + 0.5) * (hi - lo) / 20),
                    "source": TOPIC,
                    "items": COMBO,
                }
                await producer.send_and_wait(TOPIC, json.dumps(event).encode(), key=SOURCE_KEY)
            deadline = time.perf_counter() + 15
            while (input_records(port) or 0) < consumed + number:
                if time.perf_counter() > deadline:
                    raise RuntimeError("the worker did not consume the latency orders in 15 s")
                await asyncio.sleep(0.02)
            sent_at[format_instant(lo)[:10]] = time.perf_counter()
            await send_close(producer, hi)
            await asyncio.sleep(0.3)
        deadline = time.perf_counter() + 15
        while len(arrived) < len(sent_at) and time.perf_counter() < deadline:
            await asyncio.sleep(0.1)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await producer.stop()
        await consumer.stop()
    operator = [arrived[d] - t for d, t in sent_at.items() if d in arrived]
    publication = [published[d] - stamped[d] for d in sent_at if d in published]
    return operator, publication


def _percentiles_ms(values: list[float]) -> str:
    """p50 / p95 / p99 of ``values`` (s) in ms, or "-" when not measured."""
    if not values:
        return "-"
    return " / ".join(f"{percentile(values, q) * 1e3:.0f}" for q in (50, 95, 99))


def start_worker(
    spec_path: Path,
    bootstrap: str,
    port: int,
    work: Path,
    frozen_at: str,
    partitions: int,
    extra_flags: list[str],
    *,
    app_id: str = "streamdp",
    profile: Path | None = None,
    log_name: str = "worker.log",
) -> subprocess.Popen[bytes]:
    """One ``streamdp worker`` subprocess on a public clock frozen at ``frozen_at`` (RFC 3339),
    input-volume metrics on (the benchmark's progress), insecure seeded noise, logging to
    ``work / log_name``; it dies with this process."""
    launcher = [sys.executable]
    if profile is not None:
        launcher += ["-m", "cProfile", "-o", str(profile)]
    argv = [
        *launcher, "-m", "streamdp", "worker",
        "--config", str(spec_path),
        "--bootstrap", bootstrap,
        "--app-id", app_id,
        "--partitions", str(partitions),
        "--web-port", str(port),
        "--data-dir", str(work / f"data-{time.monotonic_ns()}"),
        "--session-timeout", "6",
        "--insecure-seed", "1",
        "--log-level", "warning",
        "--clock", f"frozen:{frozen_at}",
        "--input-volume-metrics",
        *extra_flags,
    ]  # fmt: skip
    with (work / log_name).open("ab") as log:
        return subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 - only calls prctl
        )


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s."""
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


# ---------------------------------------------------------------------------------- one run
def run_once(
    config_name: str,
    extra_flags: list[str],
    values: list[bytes],
    periods: int,
    latency_days: int,
    measure_bare: Callable[[str, str, int], Awaitable[float]],
    work: Path,
    profile: Path | None = None,
    engine: str = "tansu",
    measure_bare_orjson: Callable[[str, str, int], Awaitable[float]] | None = None,
) -> RunResult:
    spec_path = work / "bench.toml"
    spec_path.write_text(SPEC)
    spec = parse_spec(SPEC, origin="bench")
    clock = PeriodClock(spec.streams["restaurant-items"].period)
    broker_cm: EmbeddedBroker | KafkaBroker = (
        KafkaBroker(log_path=work / "kafka.log", start_timeout=180)
        if engine == "kafka"
        else EmbeddedBroker(log_path=work / "tansu.log", start_timeout=60)
    )
    with broker_cm as broker:
        settings = DaemonSettings(config=spec_path, bootstrap=broker.bootstrap, partitions=2)
        broker.create_topics(required_topics(spec, settings))
        asyncio.run(produce(broker.bootstrap, values))
        cpu_before = time.process_time()
        bare = asyncio.run(measure_bare(broker.bootstrap, TOPIC, len(values)))
        bare_cpu = time.process_time() - cpu_before
        port = free_loopback_port()
        # a public clock frozen after the last latency day: nothing closes by itself
        frozen = format_instant(clock.bounds(periods + latency_days - 1)[1])
        worker = start_worker(
            spec_path, broker.bootstrap, port, work, frozen, 2, extra_flags, profile=profile
        )
        try:
            t0 = n0 = None
            cpu0 = 0.0
            deadline = time.time() + 600
            t_last = 0.0
            while time.time() < deadline:
                n = input_records(port)
                now = time.time()
                if n is not None and n > 0 and t0 is None:
                    t0, n0, cpu0 = now, n, cpu_seconds(worker.pid)
                    wait0 = cpu_wait_seconds(worker.pid)
                    broker_cpu0 = broker_cpu_seconds(broker)
                if n is not None and n >= len(values):
                    t_last = now
                    break
                if worker.poll() is not None:
                    tail = (work / "worker.log").read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"worker exited early ({worker.returncode}):\n{tail}")
                time.sleep(0.05)
            else:
                raise RuntimeError("the worker did not consume the backlog within 600 s")
            if t0 is None or n0 is None:
                raise RuntimeError("no input progress was observed on /metrics")
            cpu = cpu_seconds(worker.pid) - cpu0
            cpu_wait = cpu_wait_seconds(worker.pid) - wait0
            broker_cpu = broker_cpu_seconds(broker) - broker_cpu0
            # the operator releases the backlog's days; every release is read back
            asyncio.run(close_all(broker.bootstrap, clock.bounds(periods - 1)[1]))
            releases, _ = asyncio.run(read_releases(broker.bootstrap, periods * len(COUNTERS)))
            bare_after = asyncio.run(measure_bare(broker.bootstrap, TOPIC, len(values)))
            bare_orjson = (
                asyncio.run(measure_bare_orjson(broker.bootstrap, TOPIC, len(values)))
                if measure_bare_orjson is not None
                else float("nan")
            )
            before = close_histogram(port)
            latencies, publication = asyncio.run(
                close_latency(
                    broker.bootstrap, port, periods, latency_days, clock, float(len(values))
                )
            )
            after = close_histogram(port)
            closes = after[1] - before[1]
            inside = (after[0] - before[0]) / closes if closes else float("nan")
        finally:
            stop_worker(worker)
    if t_last <= t0:
        raise RuntimeError("the backlog was consumed between two polls: use more --periods/--rate")
    rate = (len(values) - n0) / (t_last - t0)
    return RunResult(
        config_name, len(values), bare, rate, cpu, releases, latencies, inside, bare_after,
        bare_cpu_us=1e6 * bare_cpu / len(values),
        broker_cpu_us=1e6 * broker_cpu / (len(values) - n0),
        bare_orjson=bare_orjson,
        window=t_last - t0,
        worker_cpu_wait=cpu_wait,
        publication_latencies=publication,
    )  # fmt: skip


# ---------------------------------------------------------------------------------- report
def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--periods", type=int, default=100, help="simulated days pre-produced")
    parser.add_argument("--rate", type=float, default=2000.0, help="orders per day")
    parser.add_argument("--latency-days", type=int, default=20)
    parser.add_argument("--profile", action="store_true", help="one cProfile'd worker run")
    add_write_flag(parser)
    parser.add_argument(
        "--from-json",
        action="store_true",
        help="re-render daemon.md and .png from benchmarks/results/daemon.json (no new runs)",
    )
    parser.add_argument(
        "--config",
        action="append",
        type=str.split,
        help="worker flags of one configuration (repeatable; default: the three in the docstring)",
    )
    parser.add_argument(
        "--engine",
        choices=("tansu", "kafka"),
        default="tansu",
        help="the broker: embedded Tansu (default) or Apache Kafka (results in daemon_kafka.*)",
    )
    args = parser.parse_args()
    stem = "daemon" if args.engine == "tansu" else "daemon_kafka"
    if args.from_json:
        raw = json.loads((COMMITTED / f"{stem}.json").read_text())  # the committed runs
        stored = [RunResult(**r) for r in raw["runs"]]
        for key in ("runs", "periods", "rate", "latency_days"):
            if key in raw.get("args", {}):
                setattr(args, key, raw["args"][key])
        report = summarise(
            stored,
            raw["events"],
            raw["baseline"],
            args,
            raw["service_eps"],
            raw["engine_eps"],
            raw.get("engine_python_eps"),
            raw.get("conditions"),
        )
        out = output_dir(args.write)
        (out / f"{stem}.md").write_text(report)
        plot(stored, out / f"{stem}.png")
        print(report)
        print(f"wrote {out / f'{stem}.md'}")
        print(f"wrote {out / f'{stem}.png'}")
        return 0

    conditions = conditions_at_start()
    lines = list(generate("restaurant", args.periods, args.rate, seed=1, spec=parse_spec(SPEC)))
    values = [line.text.encode() for line in lines]
    baseline_name, measure_bare = bare_consumer()
    measure_bare_orjson = bare_consumer_orjson()
    configs = [
        (" ".join(flags) or "defaults", flags)
        for flags in (args.config or [[], ["--input-path", "stream"], ["--fetch-wait", "1.5"]])
    ]
    results: list[RunResult] = []
    with tempfile.TemporaryDirectory(prefix="streamdp-bench-") as tmp:
        work = Path(tmp)
        if args.profile:
            prof = work / "worker.prof"
            r = run_once(
                "defaults", [], values, args.periods, 2, measure_bare, work, prof, args.engine
            )
            print(f"profiled run: {r.daemon_eps:,.0f} events/s (cProfile overhead included)")
            stats = pstats.Stats(str(prof))
            stats.sort_stats("tottime").print_stats(25)
            stats.sort_stats("cumulative").print_stats(40)
            return 0
        for run in range(args.runs):
            for name, flags in configs:
                r = run_once(
                    name,
                    flags,
                    values,
                    args.periods,
                    args.latency_days,
                    measure_bare,
                    work,
                    engine=args.engine,
                    measure_bare_orjson=measure_bare_orjson,
                )
                results.append(r)
                print(
                    f"run {run + 1} {name:<24} bare {r.bare_eps:>9,.0f}/{r.bare_after:,.0f}/s "
                    f"daemon {r.daemon_eps:>8,.0f}/s  ratio {r.ratio:.3f}  cpu "
                    f"{r.worker_cpu:.1f}s  (orjson bare {r.bare_orjson:,.0f}/s, ratio "
                    f"{r.ratio_orjson:.3f})  releases {r.releases}  latency p50 "
                    f"{percentile(r.latencies, 50) * 1000:.0f} ms "
                    f"(in worker {r.inside_mean * 1000:.0f} ms; publication p50 "
                    f"{_percentiles_ms(r.publication_latencies).split(' / ')[0]} ms)",
                    flush=True,
                )
    service_eps, engine_eps, engine_python_eps = service_only(values, 5000)
    print(
        f"in-process: release service {service_eps:,.0f}/s, engine {engine_eps:,.0f}/s, "
        f"engine on its Python path {engine_python_eps:,.0f}/s"
    )
    out = output_dir(args.write)
    conditions = finish(conditions)
    raw = {
        "conditions": conditions,
        "events": len(values),
        "baseline": baseline_name,
        "service_eps": service_eps,
        "engine_eps": engine_eps,
        "engine_python_eps": engine_python_eps,
        "args": {
            "runs": args.runs,
            "periods": args.periods,
            "rate": args.rate,
            "latency_days": args.latency_days,
        },
        "runs": [vars(r) for r in results],
    }
    (out / f"{stem}.json").write_text(json.dumps(raw, indent=1))
    report = summarise(
        results,
        len(values),
        baseline_name,
        args,
        service_eps,
        engine_eps,
        engine_python_eps,
        conditions,
    )
    print(report)
    (out / f"{stem}.md").write_text(report)
    plot(results, out / f"{stem}.png")
    for suffix in ("json", "md", "png"):
        print(f"wrote {out / f'{stem}.{suffix}'}")
    return 0


def _seconds(value: float) -> str:
    """Seconds for a table cell; "-" where not measured (results stored before it was)."""
    return "-" if value != value else f"{value:.2f}"


def summarise(
    results: list[RunResult],
    events: int,
    baseline: str,
    args: argparse.Namespace,
    service_eps: float,
    engine_eps: float,
    engine_python_eps: float | None = None,
    conditions: dict[str, Any] | None = None,
) -> str:
    command = "`./run bench daemon_throughput --write"
    engine = getattr(args, "engine", "tansu")
    if engine != "tansu":
        command += f" --engine {engine}"
    if (args.runs, args.periods, args.rate, args.latency_days) != (5, 100, 2000.0, 20):
        command += (
            f" --runs {args.runs} --periods {args.periods} --rate {args.rate:g}"
            f" --latency-days {args.latency_days}"
        )
    if [r.config for r in results if r.config != "defaults"] == []:
        command += ' --config ""'  # the defaults row only
    command += "`"
    setup = (
        f"{events:,} pre-produced restaurant events ({args.periods} days x ~{args.rate:g} "
        "orders/day, keyed by source); one `streamdp worker` on a frozen public clock "
        f"(Faust, insecure seeded sampler, 2 partitions); baseline: {baseline} (consume + JSON "
        "decode with `json.loads`) on the same topic in the same run, just before the worker "
        "starts and just after it caught up (the ratio uses their mean); the stricter baseline "
        "decodes with orjson, as the worker's fast path does (measured once, after). "
        f"Median of {args.runs} runs per configuration, each on a fresh "
        f"broker. {conditions_text(conditions)}: compare ratios, not absolute numbers."
    )
    columns = (
        "| configuration | bare consumer events/s | daemon events/s | daemon / bare "
        "| bare with orjson events/s | daemon / bare with orjson "
        "| worker CPU s (after t0) | events per CPU-s | close latency p50 / p95 / p99 (ms) "
        "| of which in the worker, mean (ms) "
        "| publication latency p50 / p95 / p99 (ms) |"
    )
    out = [
        "# Daemon throughput and period-close latency (one worker, "
        + ("embedded Tansu broker)" if engine == "tansu" else "Apache Kafka 4.4.0, one node)"),
        "",
        f"Command: {command}",
        "",
        setup,
        "",
        columns,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in dict.fromkeys(r.config for r in results):
        rs = [r for r in results if r.config == name]
        bare = statistics.median(r.baseline for r in rs)
        daemon = statistics.median(r.daemon_eps for r in rs)
        ratio = statistics.median(r.ratio for r in rs)
        cpu = statistics.median(r.worker_cpu for r in rs)
        lat = [x for r in rs for x in r.latencies]
        out.append(
            f"| {name} | {bare:,.0f} | {daemon:,.0f} | {ratio:.3f} | "
            f"{statistics.median(r.bare_orjson for r in rs):,.0f} | "
            f"{statistics.median(r.ratio_orjson for r in rs):.3f} | {cpu:.1f} | "
            f"{statistics.median(r.events / r.worker_cpu for r in rs):,.0f} | "
            f"{percentile(lat, 50) * 1e3:.0f} / {percentile(lat, 95) * 1e3:.0f} / "
            f"{percentile(lat, 99) * 1e3:.0f} | "
            f"{statistics.median(r.inside_mean for r in rs) * 1e3:.0f} | "
            f"{_percentiles_ms([x for r in rs for x in r.publication_latencies])} |"
        )
    out += [
        "",
        "Per run:",
        "",
        (
            "| run | configuration | bare events/s before / after | daemon events/s | ratio "
            "| window s | worker CPU s | worker waiting for a CPU s | releases read |"
        ),
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    n_configs = len(dict.fromkeys(r.config for r in results))
    for i, r in enumerate(results):
        out.append(
            f"| {i // n_configs + 1} | {r.config} | {r.bare_eps:,.0f} / {r.bare_after:,.0f} | "
            f"{r.daemon_eps:,.0f} | {r.ratio:.3f} | {_seconds(r.window)} | {r.worker_cpu:.2f} | "
            f"{_seconds(r.worker_cpu_wait)} | {r.releases} |"
        )
    daemon = max(
        1.0, statistics.median(r.daemon_eps for r in results if r.config == results[0].config)
    )
    out += [
        "",
        "Where the time goes (same records, in process, no Kafka, medians of 3):",
        "",
        "| stage | events/s | CPU us per event |",
        "|---|---:|---:|",
        (f"| engine alone (`Engine.consume`) | {engine_eps:,.0f} | {1e6 / engine_eps:.1f} |"),
        *(
            [
                (
                    "| engine alone, Python path only (no native scanner) | "
                    f"{engine_python_eps:,.0f} | {1e6 / engine_python_eps:.1f} |"
                )
            ]
            if engine_python_eps
            else []
        ),
        (
            "| release service (engine + checkpoint records), batches of 5000 | "
            f"{service_eps:,.0f} | {1e6 / service_eps:.1f} |"
        ),
        f"| daemon, {results[0].config} (wall clock) | {daemon:,.0f} | {1e6 / daemon:.1f} |",
        "",
    ]
    first = [r for r in results if r.config == results[0].config]
    if all(r.bare_cpu_us == r.bare_cpu_us for r in first):  # not NaN: measured in this run
        worker_us = statistics.median(1e6 * r.worker_cpu / r.events for r in first)
        bare_us = statistics.median(r.bare_cpu_us for r in first)
        out += [
            f"CPU per event in the same runs ({results[0].config}, medians): the worker "
            f"{worker_us:.1f} us, the bare consumer {bare_us:.1f} us (x{worker_us / bare_us:.1f})"
            + (
                f"; the broker {statistics.median(r.broker_cpu_us for r in first):.1f} us while "
                "the worker read (fetches, checkpoint and output writes)."
                if all(r.broker_cpu_us == r.broker_cpu_us for r in first)
                else "."
            ),
            "",
        ]
    if all(r.worker_cpu_wait == r.worker_cpu_wait for r in first):
        busy = statistics.median((r.worker_cpu + r.worker_cpu_wait) / r.window for r in first)
        waiting = statistics.median(r.worker_cpu_wait / r.window for r in first)
        verdict = (
            "it is CPU-bound: what it lacks in wall clock against its CPU time is waiting for "
            "a core it shares with the broker and the benchmark's own process, not for the "
            "broker's answers"
            if busy >= 0.95
            else f"it was idle {1 - busy:.0%} of it (waiting for records or acknowledgements)"
        )
        out += [
            (
                f"The worker's time in the throughput window ({results[0].config}, medians): "
                f"on a CPU or waiting for one {busy:.0%} of it, waiting for a CPU "
                f"{waiting:.0%} (run-queue delay, /proc/<pid>/task/*/schedstat); {verdict}."
            ),
            "",
        ]
    out += (FINDINGS if engine == "tansu" else FINDINGS_KAFKA).strip("\n").splitlines()
    return "\n".join(out) + "\n"


FINDINGS = """
## Method

Measured on the public-clock daemon (issue 11): periods close on the worker's clock or on an
operator's close record, never on event times, and every record's bytes are digested (128-bit
BLAKE2b) so that only true duplicates are dropped. So:

- The worker runs on a frozen public clock with every period open, and its throughput is timed
  from its own count of input records made durable (input-volume metrics on, a protected
  surface in production) instead of from the newest release: with no watermark, the backlog's
  days are released by one operator close after it is consumed.
- Period-close latency is the pipeline's: from sending the operator's close record for a day
  whose orders are consumed to all five of its releases read back. Since issue 25 only the
  worker's tick closes periods: an operator's close is made by the first heartbeat tick after
  the worker reads it, up to `--tick` (0.5 s) later, which this latency includes (about half a
  tick on average); a period closed by the clock is released at its close instant exactly.
- Tansu answers no fetch early, so a record also waits for the consumer's 0.1 s long-poll.

"""

FINDINGS_KAFKA = """
## Method (Apache Kafka)

The method is the Tansu file's (`daemon.md`): a frozen public clock, throughput from the
worker's count of durable input records, close latency from an operator's close record to all
five releases read back (since issue 25 it includes the wait for the next heartbeat tick, up to
`--tick`, 0.5 s), and publication latency from the releases' timestamp (the tick's scheduled
instant, the close instant of a period closed on the clock) to all five read back: the latency
of a clock-driven close. Shared 2-core machine: compare ratios. The figures above are this
run's; the README keeps earlier runs with their commits.
"""


def plot(results: list[RunResult], path: Path) -> None:
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r.config for r in results))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    bare = [r.baseline for r in results]
    positions = np.arange(len(names) + 1)
    medians = [statistics.median(bare)] + [
        statistics.median(r.daemon_eps for r in results if r.config == n) for n in names
    ]
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown"]
    left.bar(positions, medians, color=["0.6", *colors][: len(medians)])
    for i, n in enumerate(["bare consumer", *names]):
        xs = bare if i == 0 else [r.daemon_eps for r in results if r.config == n]
        left.scatter([positions[i]] * len(xs), xs, color="k", s=10, zorder=3)
    left.axhline(TARGET, color="tab:red", ls="--", label="target 50,000 events/s")
    left.axhline(medians[0] / 2, color="0.3", ls=":", label="target: half the bare consumer")
    labels = [f"daemon\n{n.replace(' ', chr(10))}" for n in names]
    left.set_xticks(positions, ["bare aiokafka\nconsumer\n(+ JSON)", *labels], fontsize=8)
    left.set_yscale("log")
    left.set_ylabel("events/s (log)")
    left.set_title("Throughput, one worker (bars: median; dots: runs)")
    left.legend(loc="upper right", fontsize=8)
    for n, color in zip(names, colors, strict=False):
        lat = sorted(x * 1e3 for r in results if r.config == n for x in r.latencies)
        if lat:
            right.plot(lat, np.arange(1, len(lat) + 1) / len(lat), color=color, label=n)
    right.set_xlabel("period-close latency (ms): operator close sent -> all releases read")
    right.set_ylabel("fraction of periods")
    right.set_title("Period-close latency (empirical CDF)")
    right.legend(fontsize=8)
    fig.text(
        0.5,
        0.005,
        "No paper figure: the seeds report no streaming-system throughput. Shared 2-core machine.",
        ha="center",
        fontsize=8,
    )
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
