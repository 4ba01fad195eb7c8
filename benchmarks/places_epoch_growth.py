"""How a places stream's memory and revision cost grow with the periods it has closed.

``places_scale.py`` measures one width over four closes. A stream runs for many periods: it
keeps every noisy node of the current epoch, which its consistent revisions project, and drops
a past epoch's once a revision has published its last period (keeping the consistent total
carried past it); each revision projects only the nodes its new periods read (their Fenwick
read paths), so its cost should not grow with the epoch. This program closes ``--epochs``
epochs of ``--horizon`` periods at one width (revisions every ``--every`` periods) and
reports, after chosen closes,

- ``state bytes per counter``: everything the engine holds between closes, its release records
  dropped (tracemalloc, so allocation sizes: the same on any day and machine);
- ``revision temporary bytes per counter``: the peak above that state while the close that
  revises runs (the projection's work arrays and the consistent records);
- ``close s`` / ``revising close s``: median (min-max) over ``--repeats`` untraced runs of a
  plain close and of a close that also revises (its consistent records serialised to JSON).

Each measurement runs in a fresh process. The table and a plot go to benchmarks/out/
(``--write``: benchmarks/results/places_epoch_growth*).

    .venv/bin/python benchmarks/places_epoch_growth.py [--width 1e5] [--horizon 64]
        [--every 8] [--epochs 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from places_scale import ingest_period, load_places_spec, places_engine, warm_up
from results_dir import add_write_flag, output_dir


def _closes(args: argparse.Namespace) -> int:
    return args.horizon * args.epochs


def _revises(args: argparse.Namespace, close: int) -> bool:
    """Whether close ``close`` (1-based) also revises (every ``every`` periods of its epoch)."""
    return ((close - 1) % args.horizon + 1) % args.every == 0


def one_traced(args: argparse.Namespace) -> list[dict[str, float]]:
    """State and revision memory after every close, by tracemalloc."""
    import gc
    import tracemalloc

    from streamdp.synth import release_instant

    warm_up(horizon=args.horizon, every=args.every)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    spec = load_places_spec(args.width, horizon=args.horizon, every=args.every)
    engine, leaves = places_engine(spec, stores_nodes=False)
    gc.collect()
    built = tracemalloc.get_traced_memory()[0]
    rows = []
    for close in range(1, _closes(args) + 1):
        ingest_period(engine, leaves, close - 1)
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        records = engine.advance_clock(release_instant(spec, close))
        for record in records:
            if record.kind == "consistent":
                record.to_json()
        peak = tracemalloc.get_traced_memory()[1]
        del records
        gc.collect()
        state = tracemalloc.get_traced_memory()[0]
        rows.append(
            {
                "close": close,
                "state_bytes_per_counter": (state - built) / args.width,
                "with_places_bytes_per_counter": (state - base) / args.width,
                "revision_peak_bytes_per_counter": (
                    (peak - before) / args.width if _revises(args, close) else 0.0
                ),
            }
        )
    tracemalloc.stop()
    return rows


def one_timed(args: argparse.Namespace) -> list[float]:
    """Seconds of every close (those that revise include serialising their consistent
    records to JSON)."""
    from streamdp.synth import release_instant

    spec = load_places_spec(args.width, horizon=args.horizon, every=args.every)
    engine, leaves = places_engine(spec, stores_nodes=False)
    seconds = []
    for close in range(1, _closes(args) + 1):
        ingest_period(engine, leaves, close - 1)
        t0 = time.perf_counter()
        records = engine.advance_clock(release_instant(spec, close))
        for record in records:
            if record.kind == "consistent":
                record.to_json()
        seconds.append(time.perf_counter() - t0)
        del records
    return seconds


def _child(args: argparse.Namespace, mode: str) -> Any:
    flags = [
        "--width", str(args.width), "--horizon", str(args.horizon), "--every", str(args.every),
        "--epochs", str(args.epochs), "--one", mode,
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, __file__, *flags], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])


def _shown(args: argparse.Namespace) -> list[int]:
    """The closes the table shows: the first, each revising close at a power of two of the
    epoch's periods, the epoch's last, and the same in the epochs after."""
    h = args.horizon
    marks = {1}
    for e in range(args.epochs):
        marks |= {
            e * h + p for p in range(1, h + 1) if _revises(args, e * h + p) and p & (p - 1) == 0
        }
        marks |= {e * h + 1, (e + 1) * h}
    return sorted(marks)


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def _table(args: argparse.Namespace, traced: list[dict[str, float]], timed: list[list[float]],
           load: float) -> str:  # fmt: skip
    lines = [
        "# Places streams: memory and revision cost over an epoch (issue 29)",
        "",
        (
            f"Command: `.venv/bin/python benchmarks/places_epoch_growth.py --width "
            f"{args.width:g} --horizon {args.horizon} --every {args.every} --epochs "
            f"{args.epochs} --repeats {args.repeats}`. nation -> 50 states -> counties "
            f"({args.width:,} counters), fda, 1,000 events per period, a revision every "
            f"{args.every} periods of an epoch. Memory: tracemalloc, one run (allocation "
            "sizes, the same on any day). Times: median (min-max) of "
            f"{args.repeats} untraced runs, each in a fresh process; 2-core machine, load "
            f"average {load:.2f} at the start, Python 3.11."
        ),
        "",
        (
            "| close (epoch, period) | engine state per counter (bytes) | revision's temporary "
            "peak per counter (bytes) | close s (revising closes include the revision) |"
        ),
        "|---|---:|---:|---:|",
    ]
    for close in _shown(args):
        row = traced[close - 1]
        epoch, period = divmod(close - 1, args.horizon)
        revision = row["revision_peak_bytes_per_counter"]
        seconds = [run[close - 1] for run in timed]
        lines.append(
            f"| {close} ({epoch}, {period + 1}) | {row['state_bytes_per_counter']:.0f} | "
            f"{f'{revision:.0f}' if revision else '-'} | {_spread(seconds)} |"
        )
    lines += [
        "",
        (
            "State: everything the engine allocated after the places were read, between "
            "closes (open-period counts, the noisy nodes of the current epoch and of any past "
            "epoch a revision has not yet published whole, the last revision's arrays). A past "
            "epoch's nodes are dropped at the first close after the revision that publishes "
            "its last period (here the epoch's first close: the revision at its predecessor's "
            "last period). A revision projects only the nodes its new periods read (their "
            "Fenwick read paths), so its work and its temporary memory stay about the same "
            "through the epoch."
        ),
    ]
    return "\n".join(lines) + "\n"


def _plot(args: argparse.Namespace, traced: list[dict[str, float]], timed: list[list[float]],
          out: object) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    closes = [r["close"] for r in traced]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(closes, [r["state_bytes_per_counter"] for r in traced], label="engine state")
    revising = [r for r in traced if r["revision_peak_bytes_per_counter"]]
    left.plot([r["close"] for r in revising],
              [r["revision_peak_bytes_per_counter"] for r in revising], "o",
              label="revision's temporary peak")  # fmt: skip
    left.set(xlabel="periods closed", ylabel="bytes per counter")
    left.legend(fontsize=8)
    medians = [statistics.median(run[i] for run in timed) for i in range(len(closes))]
    right.plot(closes, medians, ".")
    right.set(xlabel="periods closed", ylabel="close seconds (median)", yscale="log")
    for epoch in range(1, args.epochs):
        for axis in (left, right):
            axis.axvline(epoch * args.horizon + 0.5, color="grey", linestyle=":")
    fig.suptitle(f"Places stream of {args.width:,} counters, horizon {args.horizon}")
    fig.tight_layout()
    fig.savefig(f"{out}/places_epoch_growth.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=lambda w: int(float(w)), default=100_000)
    parser.add_argument("--horizon", type=int, default=64)
    parser.add_argument("--every", type=int, default=8, help="revise every N periods (>= 1)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one", choices=("traced", "timed"), help=argparse.SUPPRESS)
    add_write_flag(parser)
    args = parser.parse_args()
    if args.every < 1 or args.horizon < 1 or args.epochs < 1 or args.width < 52:
        parser.error("--every, --horizon and --epochs must be >= 1, --width >= 52")
    if args.one == "traced":
        print(json.dumps(one_traced(args)))
        return
    if args.one == "timed":
        print(json.dumps(one_timed(args)))
        return
    load = os.getloadavg()[0]  # other work on the machine, as the header states
    traced = _child(args, "traced")
    print(f"traced: state after the last close {traced[-1]}", file=sys.stderr)
    timed = []
    for repeat in range(args.repeats):
        timed.append(_child(args, "timed"))
        print(f"timed run {repeat + 1} of {args.repeats}", file=sys.stderr)
    out = output_dir(args.write)
    text = _table(args, traced, timed, load)
    print(text)
    (out / "places_epoch_growth.md").write_text(text, encoding="utf-8")
    data = {"traced": traced, "timed": timed}
    (out / "places_epoch_growth.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    _plot(args, traced, timed, out)


if __name__ == "__main__":
    main()
