"""Scale-out on Apache Kafka: one worker against two workers in one consumer group.

One run, repeated ``--runs`` times, each on a fresh single-node Apache Kafka 4.4.0 (127.0.0.1):

1. ``--sources`` restaurant sources (default 8), each with its own input topic of
   ``--partitions`` partitions (default 4) and one stream; the source names are chosen so that
   Kafka's default partitioner spreads their records (keyed by source) evenly over the
   partitions (the source's home partition, ``streamdp.daemon.service.home_partition``);
2. the same backlog is pre-produced to every source: ``--periods`` days x ``--rate`` orders;
3. *one worker*: a ``streamdp worker`` (app id ``one-1``) reads the whole backlog; throughput =
   records made durable per second, timed from its first poll of ``/metrics`` showing input
   progress to the poll showing all of it (startup and group join excluded), and its CPU
   seconds over the same window (/proc);
4. *two workers*: two ``streamdp worker`` processes in one consumer group (app id ``two-1``,
   started together) read the same topics from the beginning; timed from the first poll at
   which both show input progress (both own partitions) to the poll at which their sum reaches
   the backlog; CPU is the sum of both workers' over that window; each worker's share of the
   records is reported (Faust's assignor co-partitions the input topics: each worker owns the
   same partition numbers of every topic, so each gets the sources whose home is there).

Reported: events/s (total) and events per worker CPU-second, one worker against two, medians of
the runs, and the broker's CPU seconds in each window. A worker that exits inside a window (exit
75 is how a worker asks its supervisor for a restart, e.g. after faust-streaming dropped a fetch
in a rebalance) ends that attempt: it is reported as discarded with the worker's reason, and the
configuration is run again from the beginning under a fresh consumer group (at most
``MAX_ATTEMPTS`` times); its figures would mix a restart's recovery into the rate. On a 2-core
machine shared with the broker, the total rate of two workers is bounded by the cores left to
them; the figure that says whether the work splits without overhead is events per worker
CPU-second.

    .venv/bin/python benchmarks/scale_out.py [--runs 3] [--sources 8 --partitions 4]

Writes scale_out.md and scale_out.json to benchmarks/out/ (with --write: the committed
benchmarks/results/); ``--from-json`` re-renders scale_out.md from the committed
benchmarks/results/scale_out.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon_throughput import (
    SPEC,
    cpu_seconds,
    input_records,
    produce,
    start_worker,
    stop_worker,
)
from results_dir import COMMITTED, add_write_flag, output_dir
from run_conditions import conditions_at_start, conditions_text, finish

from streamdp.broker import KafkaBroker, free_loopback_port
from streamdp.daemon.routing import home_partition
from streamdp.daemon.settings import DaemonSettings
from streamdp.daemon.topology import required_topics
from streamdp.engine import parse_spec
from streamdp.engine.periods import PeriodClock, format_instant
from streamdp.synth import generate

TEMPLATE_SOURCE = "restaurant-orders"
MAX_ATTEMPTS = 3  # per configuration and run


class WorkerExitError(RuntimeError):
    """A worker exited inside the timed window."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"a worker exited early ({code}): {reason}")
        self.code = code
        self.reason = reason


@dataclass
class Discarded:
    """An attempt ended by a worker's exit."""

    run: int
    workers: int
    code: int
    reason: str


def exit_reason(log: Path) -> str:
    """The worker's last CRITICAL log line (the one a worker logs when it ends itself; its last
    line otherwise)."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    for line in reversed(lines):
        if "CRITICAL" in line:
            return line[-300:]
    return lines[-1][-300:] if lines else "(empty log)"


def balanced_sources(count: int, partitions: int) -> list[str]:
    """``count`` source names whose home partitions are spread evenly over ``partitions``."""
    per_partition = -(-count // partitions)
    chosen: list[str] = []
    taken = dict.fromkeys(range(partitions), 0)
    number = 0
    while len(chosen) < count:
        name = f"orders-{number:03d}"
        home = home_partition(name, partitions)
        if taken[home] < per_partition:
            taken[home] += 1
            chosen.append(name)
        number += 1
    return chosen


def spec_text(sources: list[str]) -> str:
    """The daemon benchmark's restaurant spec (sources.X and streams.X-items), once per
    source, each reading its own topic named like the source."""
    stream = "restaurant-items"
    parts = []
    for name in sources:
        text = SPEC.replace(f"[streams.{stream}", f"[streams.{name}-items")
        text = text.replace(f'source = "{TEMPLATE_SOURCE}"', f'source = "{name}"')
        text = text.replace(f'topic = "{TEMPLATE_SOURCE}"', f'topic = "{name}"')
        text = text.replace(f"[sources.{TEMPLATE_SOURCE}]", f"[sources.{name}]")
        parts.append(text)
    return "\n".join(parts)


@dataclass
class Window:
    """One configuration's timed window."""

    workers: int
    events: float  # records made durable inside the window
    seconds: float
    worker_cpu: float
    broker_cpu: float
    shares: list[float]  # each worker's records over the whole run

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds

    @property
    def events_per_cpu_second(self) -> float:
        return self.events / self.worker_cpu


def timed_window(
    workers: list[subprocess.Popen[bytes]],
    ports: list[int],
    total: int,
    broker_pid: int | None,
    logs: list[Path],
) -> Window:
    """Poll every worker's input count (every 50 ms) from the moment all of them show progress
    until their sum reaches ``total``."""
    deadline = time.monotonic() + 900
    start: tuple[float, float, float, float] | None = None
    while time.monotonic() < deadline:
        counts = [input_records(port) for port in ports]
        now = time.perf_counter()
        for worker, log in zip(workers, logs, strict=True):
            if worker.poll() is not None:
                raise WorkerExitError(worker.returncode, exit_reason(log))
        known = [c for c in counts if c is not None]
        done = sum(known)
        if start is None and len(known) == len(ports) and all(c > 0 for c in known):
            cpu = sum(cpu_seconds(w.pid) for w in workers)
            broker = cpu_seconds(broker_pid) if broker_pid else 0.0
            start = (now, done, cpu, broker)
        if start is None and done >= total:
            raise RuntimeError(
                "the backlog was consumed before every worker showed progress (one worker took "
                "all partitions first): use more --periods"
            )
        if start is not None and done >= total:
            cpu = sum(cpu_seconds(w.pid) for w in workers) - start[2]
            broker = (cpu_seconds(broker_pid) if broker_pid else 0.0) - start[3]
            return Window(
                len(workers), done - start[1], now - start[0], cpu, broker,
                [c / done for c in known],
            )  # fmt: skip
        time.sleep(0.05)
    raise RuntimeError("the workers did not consume the backlog within 900 s")


def run_once(
    args: argparse.Namespace, work: Path, number: int, discarded: list[Discarded]
) -> list[Window]:
    """Run ``number``'s two windows (one worker, then two); attempts a worker's exit ended are
    appended to ``discarded``."""
    sources = balanced_sources(args.sources, args.partitions)
    text = spec_text(sources)
    spec_path = work / "scale.toml"
    spec_path.write_text(text)
    spec = parse_spec(text, origin="scale-out")
    template = parse_spec(SPEC, origin="bench")
    lines = list(generate("restaurant", args.periods, args.rate, seed=1, spec=template))
    values = [line.text.encode() for line in lines]
    marker = f'"source": "{TEMPLATE_SOURCE}"'.encode()
    assert all(marker in v for v in values), "the generator's records name their source"
    clock = PeriodClock(template.streams["restaurant-items"].period)
    frozen = format_instant(clock.bounds(args.periods)[1])
    total = len(values) * len(sources)
    windows = []
    with KafkaBroker(log_path=work / "kafka.log", start_timeout=180) as broker:

        def create_topics(app_id: str) -> None:
            settings = DaemonSettings(
                config=spec_path, bootstrap=broker.bootstrap, partitions=args.partitions,
                app_id=app_id,
            )  # fmt: skip
            broker.create_topics(required_topics(spec, settings), exist_ok=True)

        create_topics("one-1")  # the input topics with the first group's own
        for name in sources:
            own = [v.replace(marker, f'"source": "{name}"'.encode()) for v in values]
            asyncio.run(produce(broker.bootstrap, own, topic=name, key=name.encode()))
        for group, count in (("one", 1), ("two", 2)):
            for attempt in range(1, MAX_ATTEMPTS + 1):
                app_id = f"{group}-{attempt}"  # a fresh group reads from the beginning
                create_topics(app_id)
                ports = [free_loopback_port() for _ in range(count)]
                logs = [work / f"worker-{app_id}-{i}.log" for i in range(count)]
                workers = [
                    start_worker(
                        spec_path,
                        broker.bootstrap,
                        port,
                        work,
                        frozen,
                        args.partitions,
                        [],
                        app_id=app_id,
                        log_name=log.name,
                    )
                    for port, log in zip(ports, logs, strict=True)
                ]
                try:
                    windows.append(timed_window(workers, ports, total, broker.node_pid(0), logs))
                    break
                except WorkerExitError as exited:
                    discarded.append(Discarded(number, count, exited.code, exited.reason))
                    print(f"run {number}: {count} worker(s): {exited}; again", flush=True)
                finally:
                    for worker in workers:
                        stop_worker(worker)
            else:
                raise RuntimeError(f"{count} worker(s): a worker exited in every attempt")
    return windows


def report(
    runs: list[list[Window]],
    args: argparse.Namespace,
    discarded: list[Discarded],
    conditions: dict[str, Any] | None = None,
) -> str:
    command = "`./run bench scale_out --write"
    if (args.runs, args.sources, args.partitions, args.periods, args.rate) != (3, 8, 4, 100, 2000):
        command += (
            f" --runs {args.runs} --sources {args.sources} --partitions {args.partitions}"
            f" --periods {args.periods} --rate {args.rate:g}"
        )
    command += "`"
    out = [
        "# Scale-out on Apache Kafka 4.4.0 (one node): one worker against two in one group",
        "",
        f"Command: {command}",
        "",
        (
            f"{args.sources} restaurant sources, each its own topic of {args.partitions} "
            "partitions, spread evenly over the partitions by their keys; "
            f"{args.periods} days x ~{args.rate:g} "
            "orders pre-produced to every source; one `streamdp worker`, then two in one consumer "
            "group, read all of it from the beginning (frozen public clock, insecure seeded "
            f"sampler). Median of {args.runs} runs, each on a fresh broker. "
            f"{conditions_text(conditions)}. The broker runs on the same cores, so the total "
            "rate of two workers is bounded by the cores left to them; events per worker "
            "CPU-second says whether the work splits without overhead."
        ),
        "",
        (
            "| workers | events/s (total) | events per worker CPU-s | worker CPU s "
            "| broker CPU s | share of records per worker |"
        ),
        "|---:|---:|---:|---:|---:|---|",
    ]
    for index in range(2):
        ws = [run[index] for run in runs]
        shares = " / ".join(f"{s:.2f}" for s in ws[len(ws) // 2].shares)
        out.append(
            f"| {ws[0].workers} | {statistics.median(w.events_per_second for w in ws):,.0f} | "
            f"{statistics.median(w.events_per_cpu_second for w in ws):,.0f} | "
            f"{statistics.median(w.worker_cpu for w in ws):.1f} | "
            f"{statistics.median(w.broker_cpu for w in ws):.1f} | {shares} |"
        )
    per_run = [run[1].events_per_cpu_second / run[0].events_per_cpu_second for run in runs]
    speed = [run[1].events_per_second / run[0].events_per_second for run in runs]
    cpu_ratio, speed_ratio = statistics.median(per_run), statistics.median(speed)
    spread = f"x{min(per_run):.2f} to x{max(per_run):.2f} over the runs"
    if cpu_ratio >= 0.9 and min(per_run) >= 0.9:
        split = (
            "each worker's CPU per event stays within 10% of a single worker's or better in "
            f"every run ({spread}): no per-worker overhead from the group"
        )
    elif cpu_ratio >= 0.9:
        split = (
            "in the median run each worker's CPU per event is within 10% of a single worker's "
            f"or better, but not in every run ({spread}: windows of a few seconds on a shared "
            "machine), so the run-to-run noise is larger than any overhead of the group"
        )
    else:
        split = f"each worker spends {1 / cpu_ratio:.2f} times a single worker's CPU per event"
    out += [
        "",
        (
            "Two workers against one, per run (same broker, same topics): events per worker "
            f"CPU-second x{', x'.join(f'{r:.2f}' for r in per_run)} (median "
            f"x{cpu_ratio:.2f}); total events/s x{', x'.join(f'{r:.2f}' for r in speed)} "
            f"(median x{speed_ratio:.2f}). The group splits the sources between the workers by "
            f"partition (shares above) and {split}. On these 2 cores, shared with the broker "
            f"(its CPU seconds in the window above), two workers read x{speed_ratio:.2f} as "
            "fast as one in total. The two workers' window starts once both show progress (the "
            "first one to join reads alone until the group rebalances), so it holds fewer "
            "events."
        ),
    ]
    if discarded:
        out += ["", "Attempts discarded because a worker exited inside the window:", ""]
        out += [
            f"- run {d.run}, {d.workers} worker(s): exit {d.code}: `{d.reason}`" for d in discarded
        ]
    else:
        out += ["", "No worker exited in any attempt."]
    out += [
        "",
        "Per run:",
        "",
        (
            "| run | workers | events in window | seconds | events/s | worker CPU s "
            "| events per CPU-s | broker CPU s |"
        ),
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for number, run in enumerate(runs, 1):
        for w in run:
            out.append(
                f"| {number} | {w.workers} | {w.events:,.0f} | {w.seconds:.1f} | "
                f"{w.events_per_second:,.0f} | {w.worker_cpu:.1f} | "
                f"{w.events_per_cpu_second:,.0f} | {w.broker_cpu:.1f} |"
            )
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sources", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--periods", type=int, default=100, help="days per source")
    parser.add_argument("--rate", type=float, default=2000.0, help="orders per day")
    add_write_flag(parser)
    parser.add_argument(
        "--from-json",
        action="store_true",
        help="re-render scale_out.md from benchmarks/results/scale_out.json (no new runs)",
    )
    args = parser.parse_args()
    if args.from_json:
        raw = json.loads((COMMITTED / "scale_out.json").read_text())  # the committed runs
        for key, value in raw["args"].items():
            if key not in ("from_json", "no_write", "write"):
                setattr(args, key, value)
        stored = [[Window(**w) for w in run] for run in raw["runs"]]
        gone = [Discarded(**d) for d in raw.get("discarded", [])]
        target = output_dir(args.write) / "scale_out.md"
        text = report(stored, args, gone, raw.get("conditions"))
        target.write_text(text)
        print(text)
        print(f"wrote {target}")
        return 0
    if args.partitions < 4 or args.sources < args.partitions:
        parser.error("scale-out needs --partitions >= 4 and at least one source per partition")
    runs = []
    discarded: list[Discarded] = []
    conditions = conditions_at_start()
    with tempfile.TemporaryDirectory(prefix="streamdp-scale-") as tmp:
        for number in range(args.runs):
            windows = run_once(args, Path(tmp), number + 1, discarded)
            runs.append(windows)
            for w in windows:
                print(
                    f"run {number + 1}: {w.workers} worker(s) {w.events_per_second:,.0f} ev/s, "
                    f"{w.events_per_cpu_second:,.0f} ev per worker CPU-s, shares "
                    f"{[round(s, 2) for s in w.shares]}",
                    flush=True,
                )
    conditions = finish(conditions)
    text = report(runs, args, discarded, conditions)
    print(text)
    out = output_dir(args.write)
    (out / "scale_out.md").write_text(text)
    raw = {
        "conditions": conditions,
        "args": vars(args),
        "runs": [[vars(w) for w in run] for run in runs],
        "discarded": [vars(d) for d in discarded],
    }
    (out / "scale_out.json").write_text(json.dumps(raw, indent=1))
    print(f"wrote {out / 'scale_out.md'}")
    print(f"wrote {out / 'scale_out.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
