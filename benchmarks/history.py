"""Does a checkpoint cost more as history grows? (issue 15: "checkpoint cost per batch must not
grow with history").

The daemon's release service (``ReleaseService``, the whole per-batch path of a worker without
Kafka: routing, engine, checkpoint writes, outbox) ingests batches of records after a source has
closed 10, 10^3 and 10^5 periods. Each batch's writes are applied to a dict standing in for the
state table, as the worker applies them to its Faust table. The public clock is frozen inside an
open period, so the measured batches close nothing: their cost is ingest plus checkpoint, and a
checkpoint whose cost grows with the periods already closed shows here as falling events/s.

Streams: the restaurant example (5 item counters, fixed 60-second periods, FDA over N = 4095,
so 10^5 closed periods are 24 epochs) and the census example (355 counters, same periods). The
periods are closed in one tick before measuring; scheduled revisions are off (they run at period
closes, which the measured batches do not make; the epoch-end revision stays on).

Prints a table (median of ``--repeats`` timed passes of ``--batches`` batches of ``--batch``
records each; ratio to the 10-period row of the same stream, measured in the same run) and
writes ``benchmarks/results/history.md``.

    .venv/bin/python benchmarks/history.py [--histories 10,1000,100000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from streamdp.daemon.service import InputRecord, ReleaseService, StateWrite, runs_of
from streamdp.engine import EngineSpec, parse_spec
from streamdp.engine.periods import format_instant
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec, generate

RESULTS = Path(__file__).resolve().parent / "results"
START = 1704067200.0  # 2024-01-01T00:00:00Z
PERIOD_SECONDS = 60


def history_spec(scenario: str) -> EngineSpec:
    """The example spec with fixed 60-second periods from START, N = 4095 and no scheduled
    revisions (the epoch-end revision stays)."""
    text = example_spec(scenario).raw
    stream_name, stream = next(iter(text["streams"].items()))
    stream = dict(stream)
    stream["period"] = {"unit": "fixed", "start": "2024-01-01T00:00:00Z", "length": 60}
    stream["horizon"] = 4095
    stream["consistency"] = {"every_periods": 0, "at_epoch_end": True}
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


def apply(state: dict[str, Any], writes: Iterable[StateWrite]) -> None:
    for write in writes:
        if write.value is None:
            state.pop(write.key, None)
        else:
            state[write.key] = write.value


def measure(scenario: str, closed: int, batch: int, batches: int, repeats: int) -> float:
    """Events/s of the release service after ``closed`` periods (median of ``repeats``)."""
    spec = history_spec(scenario)
    source = next(iter(spec.sources.values()))
    now = START + closed * PERIOD_SECONDS + PERIOD_SECONDS / 2  # inside period ``closed``
    state: dict[str, Any] = {}
    service = ReleaseService(
        spec,
        sampler=InsecureSeededSampler(1),
        state=state,
        topic_partitions={source.topic: 1},
        clock=lambda: now,
        pace=closed + 1,
    )
    outcome = service.assign([0])
    apply(state, outcome.writes)
    apply(state, outcome.cleanup)
    outcome = service.tick()  # closes the history in one step
    apply(state, outcome.writes)
    apply(state, outcome.cleanup)
    values = records_at(scenario, spec, now, batch * batches * repeats)
    key = source.name.encode()
    offset = 0
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(batches):
            chunk = values[offset : offset + batch]
            records = [
                InputRecord(source.topic, 0, offset + i, key, v) for i, v in enumerate(chunk)
            ]
            offset += batch
            outcome = service.process_runs(runs_of(records))
            apply(state, outcome.writes)
            apply(state, outcome.cleanup)
        rates.append(batch * batches / (time.perf_counter() - started))
    return statistics.median(rates)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--histories", default="10,1000,100000", help="closed periods to test")
    parser.add_argument("--scenarios", default="restaurant,census", help="example streams")
    parser.add_argument("--batch", type=int, default=500, help="records per batch")
    parser.add_argument("--batches", type=int, default=10, help="batches per timed pass")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes (median)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    histories = [int(h) for h in args.histories.split(",")]
    rows = []
    for scenario in args.scenarios.split(","):
        base = None
        for closed in histories:
            rate = measure(scenario, closed, args.batch, args.batches, args.repeats)
            base = base or rate
            rows.append((scenario, closed, rate, rate / base))
            print(f"{scenario:>10} {closed:>8,} closed  {rate:>10,.0f} events/s  {rate / base:.3f}")
            sys.stdout.flush()
    command = "python benchmarks/history.py " + " ".join(argv or sys.argv[1:])
    table = [
        "| stream | periods closed before | release service events/s (median) | ratio to 10 |",
        "|---|---:|---:|---:|",
        *[f"| {s} | {c:,} | {r:,.0f} | {q:.3f} |" for s, c, r, q in rows],
    ]
    text = "\n".join(
        [
            "# Checkpoint cost against history (issue 15)",
            "",
            f"Command: `{command.strip()}`",
            "",
            (
                f"Batches of {args.batch} records, {args.batches} batches per timed pass, "
                f"median of {args.repeats} passes; shared 2-core machine (compare ratios, "
                "measured in the same run)."
            ),
            "",
            *table,
            "",
        ]
    )
    print("\n".join(table))
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "history.md").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
