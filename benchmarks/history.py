"""Does a checkpoint cost more as history grows? (issue 15: "checkpoint cost per batch must not
grow with history").

The daemon's release service (``ReleaseService``, the whole per-batch path of a worker without
Kafka: routing, engine, checkpoint writes, outbox) ingests batches of records after a source has
closed 10, 10^3 and 10^5 periods. Each batch's writes are applied to a dict standing in for the
state table, as the worker applies them to its Faust table. The public clock is frozen inside an
open period, so the measured batches close nothing: their cost is ingest plus checkpoint, and a
checkpoint whose cost grows with the periods already closed shows here as falling events/s.

Streams: the restaurant example (5 item counters, fixed 60-second periods, FDA over N = 4095,
so 10^5 closed periods are 24 epochs) and the census example (355 counters, same periods).
Revisions are off: they run at period closes, which the measured batches do not make, and at
355 counters they would only lengthen the setup. The history is closed by the source's engine
before measuring (its releases are dropped, not put through the outbox: 35.5 million census
release records would not fit in memory); one untimed batch then checkpoints it, writing every
node of the history to the state dict, as the worker's checkpoints would have.

The garbage collector is tuned as in a worker (``tune_garbage_collector``, at start, before
any history is built: the history's objects are scanned by full collections, as a worker's).
Timed passes of the histories alternate (pass 1 of every history, then pass 2, ...), so a
change in the shared machine's load hits every row alike. Prints and writes (to
``benchmarks/out/history.md``; with ``--write`` the committed ``benchmarks/results/history.md``)
the median over ``--repeats`` passes of ``--batches`` batches of ``--batch`` records each, as
events per wall-clock second and per CPU second of the process, each with its ratio to the
10-period row of the same stream.

With ``--horizon 1`` an epoch rolls at every period, so the history also holds 10^5 epochs:
each with its own ledger spend and node count (before the ledger kept its runs as entries came,
a checkpoint walked every spend: restaurant at 10^4 epochs ran at 0.55 of its 10-period rate;
now 0.97, and 0.96 at 10^5; --repeats 3 --batches 5, by hand).

    .venv/bin/python benchmarks/history.py [--histories 10,1000,100000] [--repeats 5] [--horizon 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from results_dir import add_write_flag, output_dir
from run_conditions import conditions_at_start, conditions_text, finish

from streamdp.daemon.gc_tuning import tune_garbage_collector
from streamdp.daemon.outcome import BatchOutcome
from streamdp.daemon.routing import InputRecord, runs_of
from streamdp.daemon.service import ReleaseService
from streamdp.engine import EngineSpec, parse_spec
from streamdp.engine.periods import format_instant
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec, generate

START = 1704067200.0  # 2024-01-01T00:00:00Z
PERIOD_SECONDS = 60
#: periods the engine closes per step while building a history (bounds the dropped releases)
CLOSE_STEP = 256


def history_spec(scenario: str, horizon: int = 4095) -> EngineSpec:
    """The example spec with fixed 60-second periods from START, N = ``horizon`` and no
    revisions (``--horizon 1``: an epoch rolls, and a spend is recorded, at every period)."""
    text = example_spec(scenario).raw
    stream_name, stream = next(iter(text["streams"].items()))
    stream = dict(stream)
    stream["period"] = {"unit": "fixed", "start": "2024-01-01T00:00:00Z", "length": 60}
    stream["horizon"] = horizon
    stream["consistency"] = {"every_periods": 0, "at_epoch_end": False}
    stream["allowed_lateness"] = "0s"
    stream["max_future_periods"] = 0
    return parse_spec(_toml({"sources": text["sources"], "streams": {stream_name: stream}}))


def _toml(data: dict[str, Any]) -> str:
    """Just enough TOML for a spec (tables, strings, numbers, lists, inline tables)."""

    def value(v: Any) -> str:
        if isinstance(v, dict):
            return "{ " + ", ".join(f'"{k}" = {value(x)}' for k, x in v.items()) + " }"
        if isinstance(v, list | tuple):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        return str(v)

    lines = []
    for section, tables in data.items():
        for name, table in tables.items():
            lines.append(f'[{section}."{name}"]')
            lines += [f'"{k}" = {value(v)}' for k, v in table.items()]
    return "\n".join(lines) + "\n"


def records_at(scenario: str, spec: EngineSpec, instant: float, count: int) -> list[bytes]:
    """``count`` valid records of the scenario, all stamped ``instant`` (one open period)."""
    out: list[bytes] = []
    stamp = format_instant(instant)
    for line in generate(scenario, 1 + count // 50, 60, seed=7, spec=spec):
        event = json.loads(line.text)
        event["event_time"] = stamp
        event["event_id"] = f"{event['event_id']}-{len(out)}"
        out.append(json.dumps(event).encode())
        if len(out) == count:
            return out
    raise AssertionError(f"the generator gave {len(out)} records, not {count}")


class History:
    """A release service whose one source has closed ``closed`` periods, ready to time."""

    def __init__(
        self, scenario: str, closed: int, batch: int, records: int, horizon: int = 4095
    ) -> None:
        spec = history_spec(scenario, horizon)
        self.source = next(iter(spec.sources.values()))
        self.batch = batch
        now = START + closed * PERIOD_SECONDS + PERIOD_SECONDS / 2  # inside period ``closed``
        self.state: dict[str, Any] = {}
        self.service = ReleaseService(
            spec,
            sampler=InsecureSeededSampler(1),
            state=self.state,
            topic_partitions={self.source.topic: 1},
            clock=lambda: now,
            pace=CLOSE_STEP,
        )
        self._apply(self.service.assign([0]))
        engine = self.service.engines()[self.source.name]
        engine.advance_clock(now)  # the history's releases are dropped (see the docstring)
        engine.drop_recorded_outputs()
        while engine.due():
            engine.advance_clock(now)
            engine.drop_recorded_outputs()
        assert all(r.closed == closed for r in engine.streams.values())
        self.values = records_at(scenario, spec, now, records + batch)
        self.offset = 0
        self._ingest(1)  # untimed: its checkpoint stores the whole history's nodes
        nodes = sum(1 for key in self.state if "|node|" in key)
        assert nodes >= closed, f"{nodes} nodes stored after {closed} closed periods"

    def _apply(self, outcome: BatchOutcome) -> None:
        for write in (*outcome.writes, *outcome.cleanup):
            if write.value is None:
                self.state.pop(write.key, None)
            else:
                self.state[write.key] = write.value

    def _ingest(self, batches: int) -> None:
        key = self.source.name.encode()
        for _ in range(batches):
            first = self.offset
            chunk = self.values[first : first + self.batch]
            records = [
                InputRecord(self.source.topic, 0, first + i, key, v) for i, v in enumerate(chunk)
            ]
            self.offset += len(chunk)
            self._apply(self.service.process_runs(runs_of(records)))

    def timed_pass(self, batches: int) -> tuple[float, float]:
        """(events per wall-clock second, events per CPU second) of ``batches`` batches."""
        wall, cpu = time.perf_counter(), time.process_time()
        self._ingest(batches)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        events = self.batch * batches
        return events / wall, events / max(cpu, 1e-9)


def measure(
    scenario: str, histories: list[int], batch: int, batches: int, repeats: int, horizon: int
) -> list[list[tuple[float, float]]]:
    """Every timed pass's (wall, CPU) events/s of the release service after each of
    ``histories`` closed periods, the timed passes of the histories alternating."""
    prepared = [
        History(scenario, closed, batch, batch * batches * repeats, horizon) for closed in histories
    ]
    passes: list[list[tuple[float, float]]] = [[] for _ in histories]
    for _ in range(repeats):
        for history, rates in zip(prepared, passes, strict=True):
            rates.append(history.timed_pass(batches))
    return passes


def _spread(values: list[float]) -> str:
    """``median (min-max)`` of events/s figures."""
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--histories", default="10,1000,100000", help="closed periods to test")
    parser.add_argument("--scenarios", default="restaurant,census", help="example streams")
    parser.add_argument("--batch", type=int, default=500, help="records per batch")
    parser.add_argument("--batches", type=int, default=10, help="batches per timed pass")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes (median)")
    parser.add_argument("--horizon", type=int, default=4095, help="periods per epoch")
    add_write_flag(parser)
    args = parser.parse_args(argv)
    histories = [int(h) for h in args.histories.split(",")]
    conditions = conditions_at_start()
    tune_garbage_collector()  # as a worker process does at start
    rows = []
    for scenario in args.scenarios.split(","):
        passes = measure(scenario, histories, args.batch, args.batches, args.repeats, args.horizon)
        walls = [[w for w, _ in rates] for rates in passes]
        cpus = [[c for _, c in rates] for rates in passes]
        wall0, cpu0 = statistics.median(walls[0]), statistics.median(cpus[0])
        for closed, wall, cpu in zip(histories, walls, cpus, strict=True):
            ratio_wall = statistics.median(wall) / wall0
            ratio_cpu = statistics.median(cpu) / cpu0
            rows.append((scenario, closed, _spread(wall), ratio_wall, _spread(cpu), ratio_cpu))
            print(
                f"{scenario:>10} {closed:>8,} closed  {_spread(wall)} events/s "
                f"{ratio_wall:.3f}  {_spread(cpu)} events/CPU-s {ratio_cpu:.3f}"
            )
        sys.stdout.flush()
    conditions = finish(conditions)
    command = ".venv/bin/python benchmarks/history.py " + " ".join(argv or sys.argv[1:])
    table = [
        (
            "| stream | periods closed before | events/s, median (min-max) | ratio | "
            "events per CPU second, median (min-max) | ratio |"
        ),
        "|---|---:|---:|---:|---:|---:|",
        *[f"| {s} | {c:,} | {w} | {qw:.3f} | {u} | {qu:.3f} |" for s, c, w, qw, u, qu in rows],
    ]
    text = "\n".join(
        [
            "# Checkpoint cost against history (issue 15)",
            "",
            f"Command: `{command.strip()}`",
            "",
            (
                f"Batches of {args.batch} records, {args.batches} batches per timed pass, "
                f"median of {args.repeats} passes (min-max over the passes); ratios are of "
                "medians measured in the same run, against the stream's first row. "
                f"{conditions_text(conditions, own='nothing but this process')}."
            ),
            "",
            *table,
            "",
            (
                "Notes on earlier runs (what changed and why the rows stopped falling): "
                "[history_notes.md](history_notes.md)."
            ),
            "",
        ]
    )
    print("\n".join(table))
    target = output_dir(args.write) / "history.md"
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
