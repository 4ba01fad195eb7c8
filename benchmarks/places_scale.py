"""Places streams at scale (issue 29): time and memory of a period close from 10^3 to 10^7
counters per stream.

Each width runs in a fresh subprocess (so its peak RSS is its own): a places stream over a
synthetic nation -> 50 states -> counties tree (no attributes: counters = places), pure DP
with fda, horizon 8. It ingests 1,000 events per period, closes 4 periods and revises them
(one consistent revision, asked for after the fourth close); per run it reports

- ``close``: the median time of closing one period (the node's noise for every counter, the
  release records as objects) with the seeded test sampler;
- ``json``: serialising those release records (what the replay and the worker write);
- ``revision``: that revision, timed on its own: the tree projection per node (O(counters x
  periods of the epoch so far)) and its consistent records as objects; ``revision JSON``:
  serialising those records (four periods of every counter);
- ``secure noise``: drawing as many discrete-Laplace samples with OpenDP's exact sampler
  (production noise; the seeded sampler's time is part of ``close``);
- ``build``: reading the places and building the engine; ``peak RSS`` of the subprocess.

With ``--traced-widths`` a second table (``places_scale_memory.md``) breaks the memory down
with tracemalloc: the places tree per place, the engine's state per counter between closes,
and one close's release records per counter while they are held.

Medians over ``--repeats`` runs with their spread (min-max). Tables and a plot go to
benchmarks/out/ (``--write``: the committed benchmarks/results/places_scale*).

    .venv/bin/python benchmarks/places_scale.py [--widths 1e3,1e4,1e5,1e6,1e7] [--repeats 3]
        [--traced-widths 1e4,1e5,1e6]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

from results_dir import add_write_flag, output_dir

STATES = 50
#: the modules whose allocations are per place (the tree and its names), not per counter
PER_PLACE_MODULES = ("streamdp/kinds/places_file.py", "streamdp/consistency/tree.py")
PERIODS = 4
EVENTS_PER_PERIOD = 1000


SPEC = """
[sources.admissions]
topic = "admissions"
kind = "person"
epsilon_cap = 1.0
[streams.by-place]
source = "admissions"
epsilon = 1.0
sensitivity = 3
horizon = {horizon}
period = {{ unit = "day", start = "2024-01-01" }}
constraints = {{ kind = "tree" }}
consistency = {{ every_periods = {every}, at_epoch_end = false }}
counters = {{ kind = "places", places = "places.csv", field = "place" }}
"""


def _places_bytes(width: int) -> bytes:
    """A nation, 50 states and ``width - 51`` counties spread evenly over them."""
    counties = width - 1 - STATES
    rows = ["node,parent", "N,"]
    rows += [f"S{s},N" for s in range(STATES)]
    rows += [f"C{c},S{c % STATES}" for c in range(counties)]
    return ("\n".join(rows) + "\n").encode()


def load_places_spec(width: int, *, horizon: int = 8, every: int = 0) -> Any:
    """The spec of a ``width``-counter places stream (its places tree read), with revisions
    every ``every`` periods (0: only when :meth:`Engine.revise` is called)."""
    import tempfile
    from pathlib import Path

    from streamdp.engine import load_spec

    folder = Path(tempfile.mkdtemp(prefix="places-scale-"))
    (folder / "places.csv").write_bytes(_places_bytes(width))
    text = SPEC.format(horizon=horizon, every=every)
    (folder / "spec.toml").write_text(text, encoding="utf-8")
    return load_spec(folder / "spec.toml")


def places_engine(spec: Any, *, stores_nodes: bool = True) -> tuple[Any, list[str]]:
    """An engine on ``spec`` (seeded noise) and the first 1,000 leaves of its tree; with
    ``stores_nodes=False`` it drops a past epoch's nodes as soon as no revision reads them (as
    a replay does; the daemon, at the checkpoint that stores them)."""
    from streamdp.engine import Engine
    from streamdp.noise import InsecureSeededSampler

    places = spec.streams["by-place"].counters.places
    engine = Engine(spec, sampler=InsecureSeededSampler(1), stores_nodes=stores_nodes)
    return engine, [places.ids[i] for i in places.tree.leaves[:EVENTS_PER_PERIOD].tolist()]


def ingest_period(engine: Any, leaves: list[str], period: int) -> None:
    """One event at each of ``leaves`` in period ``period`` (0-based day from 2024-01-01)."""
    day = (datetime.date(2024, 1, 1) + datetime.timedelta(days=period)).isoformat()
    for i, leaf in enumerate(leaves):
        event = {
            "event_id": f"e{period}-{i}",
            "event_time": f"{day}T12:00:00Z",
            "attributes": {"place": leaf},
        }
        engine.ingest(json.dumps(event).encode())


def warm_up(*, horizon: int = 8, every: int = 0) -> None:
    """Close one period of a 200-counter stream, so that what a traced run measures next does
    not include the imports and caches a first close fills."""
    import gc

    from streamdp.synth import release_instant

    spec = load_places_spec(200, horizon=horizon, every=every)
    engine, leaves = places_engine(spec)
    ingest_period(engine, leaves, 0)
    engine.advance_clock(release_instant(spec, 1))
    del spec, engine, leaves
    gc.collect()


def one_run(width: int) -> dict[str, float]:
    """Measure one width's times and peak RSS in this process (see the module docstring)."""
    from streamdp.noise import OpenDPDiscreteLaplace
    from streamdp.synth import release_instant

    started = time.perf_counter()
    spec = load_places_spec(width)
    engine, leaves = places_engine(spec)
    build = time.perf_counter() - started
    closes, serialise, json_bytes = [], [], 0.0
    for period in range(PERIODS):
        ingest_period(engine, leaves, period)
        t0 = time.perf_counter()
        records = engine.advance_clock(release_instant(spec, period + 1))
        closes.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for record in records:
            record.to_json()
        serialise.append(time.perf_counter() - t0)
        if period == 0:  # every thousandth record of a close
            sample = records[:: max(1, len(records) // 1000)]
            json_bytes = sum(len(record.to_json()) for record in sample) / len(sample)
        del records
    # the revision of the four periods: the tree projection and its consistent records, then
    # those records as JSON
    t0 = time.perf_counter()
    revised = engine.revise("by-place")
    revision = time.perf_counter() - t0
    t0 = time.perf_counter()
    for record in revised:
        record.to_json()
    revision_json = time.perf_counter() - t0
    del revised
    t0 = time.perf_counter()
    OpenDPDiscreteLaplace().discrete_laplace(3.0, width)
    secure = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "width": width,
        "build": build,
        "close": statistics.median(closes),
        "json": statistics.median(serialise),
        "revision": revision,
        "revision_json": revision_json,
        "secure_noise": secure,
        "peak_rss_mib": peak_kib / 1024,
        "json_bytes_per_record": json_bytes,
    }


def one_traced(width: int) -> dict[str, float]:
    """Where one width's memory goes, by tracemalloc (numpy reports its buffers to it): what
    is kept per place (allocated in :data:`PER_PLACE_MODULES`: the tree and its cached
    structure, identifiers, labels and the leaf -> path routing table), the rest of the
    engine's state per counter between closes (after the last close, its records dropped: the
    counters, the epoch's stored nodes, the last revision), and one close's release records
    per counter while they are held. A small stream runs first so that imports are not counted."""
    import gc
    import tracemalloc

    from streamdp.synth import release_instant

    warm_up()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    spec = load_places_spec(width)
    engine, leaves = places_engine(spec)
    held, json_bytes = 0, 0.0
    for period in range(PERIODS):
        ingest_period(engine, leaves, period)
        before = tracemalloc.get_traced_memory()[0]
        records = engine.advance_clock(release_instant(spec, period + 1))
        if period == 0:
            held = tracemalloc.get_traced_memory()[0] - before
            sample = records[:: max(1, len(records) // 1000)]
            json_bytes = sum(len(record.to_json()) for record in sample) / len(sample)
        del records
        gc.collect()
    del engine.revise("by-place")[:]  # the fourth close's revision: its arrays stay cached
    gc.collect()
    total = tracemalloc.get_traced_memory()[0] - base
    per_place = sum(
        stat.size
        for stat in tracemalloc.take_snapshot().statistics("filename")
        if stat.traceback[0].filename.endswith(PER_PLACE_MODULES)
    )
    tracemalloc.stop()
    return {
        "width": width,
        "places_bytes_per_place": per_place / width,
        "state_bytes_per_counter": (total - per_place) / width,
        "records_bytes_per_counter": held / width,
        "json_bytes_per_record": json_bytes,
    }


def _subprocess_run(flag: str, width: int) -> dict[str, float] | None:
    """One measurement in a fresh process (its peak RSS its own); None when it failed."""
    done = subprocess.run(
        [sys.executable, __file__, flag, str(width)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        print(f"width {width} ({flag}): failed\n{done.stderr[-2000:]}", file=sys.stderr)
        return None
    row: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return row


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--widths", default="1e3,1e4,1e5,1e6,1e7", help="timed widths (empty: none)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--traced-widths",
        default="1e4,1e5,1e6",
        help="widths whose memory is broken down with tracemalloc (one run each, about 2x "
        "slower than untraced; empty: none)",
    )
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the subprocess
    parser.add_argument("--one-traced", type=int, help=argparse.SUPPRESS)
    add_write_flag(parser)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one)))
        return
    if args.one_traced:
        print(json.dumps(one_traced(args.one_traced)))
        return
    out = output_dir(args.write)
    args.load_at_start = os.getloadavg()[0]  # other work on the machine, as the header states
    runs: dict[int, list[dict[str, float]]] = {}
    for width in _widths(args.widths):
        for repeat in range(args.repeats):
            row = _subprocess_run("--one", width)
            if row is None:
                break
            runs.setdefault(width, []).append(row)
            print(f"width {width} run {repeat + 1}: {row}", file=sys.stderr)
    if runs:
        text = _timing_table(runs, args)
        print(text)
        (out / "places_scale.md").write_text(text, encoding="utf-8")
        (out / "places_scale.json").write_text(json.dumps(runs, indent=1), encoding="utf-8")
        _plot(runs, out)
    traced: dict[int, dict[str, float]] = {}
    for width in _widths(args.traced_widths):
        row = _subprocess_run("--one-traced", width)
        if row is not None:
            traced[width] = row
            print(f"width {width} traced: {row}", file=sys.stderr)
    if traced:
        text = _memory_table(traced, args)
        print(text)
        (out / "places_scale_memory.md").write_text(text, encoding="utf-8")
        (out / "places_scale_memory.json").write_text(
            json.dumps(traced, indent=1), encoding="utf-8"
        )


def _widths(written: str) -> list[int]:
    return [int(float(w)) for w in written.split(",") if w.strip()]


def _timing_table(runs: dict[int, list[dict[str, float]]], args: argparse.Namespace) -> str:
    lines = [
        "# Places streams at scale (issue 29)",
        "",
        (
            f"Command: `.venv/bin/python benchmarks/places_scale.py --widths {args.widths} "
            f"--repeats {args.repeats} --traced-widths '{args.traced_widths}'`. Median "
            f"(min-max) of {args.repeats} runs, each width in a fresh process; "
            "nation -> 50 states -> counties, fda, horizon 8, 1,000 events "
            "per period, one revision of the four periods closed; 2-core machine, load average "
            f"{args.load_at_start:.2f} at the start, Python 3.11."
        ),
        "",
        (
            "| counters | build s | period close s | records to JSON s | revision s | "
            "its records to JSON s | secure noise s | peak RSS MiB | JSON bytes per record |"
        ),
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for width, rows in runs.items():
        secure = _spread([r["secure_noise"] for r in rows])
        lines.append(
            f"| {width:,} | {_spread([r['build'] for r in rows])} | "
            f"{_spread([r['close'] for r in rows])} | {_spread([r['json'] for r in rows])} | "
            f"{_spread([r['revision'] for r in rows])} | "
            f"{_spread([r['revision_json'] for r in rows])} | {secure} | "
            f"{_spread([r['peak_rss_mib'] for r in rows])} | "
            f"{statistics.median(r['json_bytes_per_record'] for r in rows):.0f} |"
        )
    lines += [
        "",
        (
            "Period close = one period's node noise (seeded sampler) and release records for "
            "every counter; production adds the secure noise column (OpenDP's exact discrete "
            "Laplace, one sample per counter per close). JSON bytes per record: the mean over "
            "every thousandth release record of the first close."
        ),
    ]
    return "\n".join(lines) + "\n"


def _memory_table(traced: dict[int, dict[str, float]], args: argparse.Namespace) -> str:
    lines = [
        "# Places streams: where the memory goes (issue 29)",
        "",
        (
            f"Command: `.venv/bin/python benchmarks/places_scale.py --widths '{args.widths}' "
            f"--traced-widths {args.traced_widths}`. tracemalloc, one run per width, each in "
            "a fresh process (the figures are allocation sizes, not times: they do not vary "
            "with the machine's load); nation -> 50 states -> counties, fda, horizon 8, 1,000 "
            "events per period, four closes, then their revision; Python 3.11, numpy 2."
        ),
        "",
        (
            "| counters | per place: tree, names, routing (bytes) | engine state per counter "
            "between closes (bytes) | one close's release records held, per counter (bytes) "
            "| JSON bytes per release record |"
        ),
        "|---:|---:|---:|---:|---:|",
    ]
    for width, row in traced.items():
        lines.append(
            f"| {width:,} | {row['places_bytes_per_place']:.0f} | "
            f"{row['state_bytes_per_counter']:.0f} | "
            f"{row['records_bytes_per_counter']:.0f} | {row['json_bytes_per_record']:.0f} |"
        )
    lines += [
        "",
        (
            "Here every counter is a place (no attributes). Per place: what "
            "streamdp/kinds/places_file.py and streamdp/consistency/tree.py allocated (the "
            "tree and its cached structure, identifiers, labels, the leaf -> path table "
            "that routes an event). State per counter: everything else after the fourth close "
            "and its revision, records dropped: open-period counts, the epoch's stored "
            "noisy nodes, the last revision's arrays. Records: the release records of the "
            "first close while the engine hands them over (before they are written). JSON: "
            "the mean over every thousandth record of that close. Imports are not counted (a "
            "200-counter stream runs first)."
        ),
    ]
    return "\n".join(lines) + "\n"


def _plot(runs: dict[int, list[dict[str, float]]], out: object) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    widths = sorted(runs)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for key, label in (
        ("close", "period close (seeded noise, records)"),
        ("json", "records to JSON"),
        ("revision", "revision (tree projection, records)"),
        ("revision_json", "revision's records to JSON"),
        ("secure_noise", "secure noise (OpenDP)"),
    ):
        left.plot(widths, [statistics.median(r[key] for r in runs[w]) for w in widths], "o-",
                  label=label)  # fmt: skip
    left.axhline(10, color="grey", linestyle=":", label="10 s")
    left.set(xscale="log", yscale="log", xlabel="counters per stream", ylabel="seconds")
    left.legend(fontsize=8)
    right.plot(widths, [statistics.median(r["peak_rss_mib"] for r in runs[w]) for w in widths],
               "o-")  # fmt: skip
    right.set(xscale="log", yscale="log", xlabel="counters per stream", ylabel="peak RSS, MiB")
    fig.suptitle("Places streams: one period close by counters per stream")
    fig.tight_layout()
    fig.savefig(f"{out}/places_scale.png", dpi=110)


if __name__ == "__main__":
    main()
