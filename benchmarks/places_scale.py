"""Places streams at scale (issue 29): time and memory of a period close from 10^3 to 10^7
counters per stream.

Each width runs in a fresh subprocess (so its peak RSS is its own): a places stream over a
synthetic nation -> 50 states -> counties tree (no attributes: counters = places), pure DP
with fda, horizon 8, consistent revisions every 4 periods. It ingests 1,000 events per period
and closes 4 periods; per run it reports

- ``close``: the median time of closing one period (the node's noise for every counter, the
  release records as objects) with the seeded test sampler;
- ``json``: serialising those release records (what the replay and the worker write);
- ``revision``: the extra time of the close that runs the consistent revision (tree projection
  per node, O(counters), and the consistent records);
- ``secure noise``: drawing as many discrete-Laplace samples with OpenDP's exact sampler
  (production noise; the seeded sampler's time is part of ``close``);
- ``build``: reading the places and building the engine; ``peak RSS`` of the subprocess.

Medians over ``--repeats`` runs with their spread (min-max). Tables and a plot go to
benchmarks/out/ (``--write``: the committed benchmarks/results/places_scale.*).

    .venv/bin/python benchmarks/places_scale.py [--widths 1e3,1e4,1e5,1e6,1e7] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

from results_dir import add_write_flag, output_dir

STATES = 50
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
horizon = 8
period = { unit = "day", start = "2024-01-01" }
constraints = { kind = "tree" }
consistency = { every_periods = 4, at_epoch_end = false }
counters = { kind = "places", places = "places.csv", field = "place" }
"""


def _places_bytes(width: int) -> bytes:
    """A nation, 50 states and ``width - 51`` counties spread evenly over them."""
    counties = width - 1 - STATES
    rows = ["node,parent", "N,"]
    rows += [f"S{s},N" for s in range(STATES)]
    rows += [f"C{c},S{c % STATES}" for c in range(counties)]
    return ("\n".join(rows) + "\n").encode()


def one_run(width: int) -> dict[str, float]:
    """Measure one width in this process (see the module docstring)."""
    import tempfile
    from pathlib import Path

    from streamdp.engine import Engine, load_spec
    from streamdp.noise import InsecureSeededSampler, OpenDPDiscreteLaplace
    from streamdp.synth import release_instant

    folder = Path(tempfile.mkdtemp(prefix="places-scale-"))
    (folder / "places.csv").write_bytes(_places_bytes(width))
    (folder / "spec.toml").write_text(SPEC, encoding="utf-8")
    started = time.perf_counter()
    spec = load_spec(folder / "spec.toml")
    places = spec.streams["by-place"].counters.places
    assert places is not None
    engine = Engine(spec, sampler=InsecureSeededSampler(1))
    build = time.perf_counter() - started
    leaves = [places.ids[i] for i in places.tree.leaves[:EVENTS_PER_PERIOD].tolist()]
    closes, serialise, revision = [], [], 0.0
    for period in range(PERIODS):
        day = f"2024-01-{period + 1:02d}"
        for i, leaf in enumerate(leaves):
            event = {
                "event_id": f"e{period}-{i}",
                "event_time": f"{day}T12:00:00Z",
                "attributes": {"place": leaf},
            }
            engine.ingest(json.dumps(event).encode())
        t0 = time.perf_counter()
        records = engine.advance_clock(release_instant(spec, period + 1))
        elapsed = time.perf_counter() - t0
        t0 = time.perf_counter()
        for record in records:
            record.to_json()
        serialise.append(time.perf_counter() - t0)
        if period + 1 == PERIODS:  # the close that also revises
            revision = elapsed - statistics.median(closes)
        else:
            closes.append(elapsed)
        del records
    t0 = time.perf_counter()
    OpenDPDiscreteLaplace().discrete_laplace(3.0, width)
    secure = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "width": width,
        "build": build,
        "close": statistics.median(closes),
        "json": statistics.median(serialise[:-1]),
        "revision": revision,
        "secure_noise": secure,
        "peak_rss_mib": peak_kib / 1024,
    }


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", default="1e3,1e4,1e5,1e6,1e7")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the subprocess
    add_write_flag(parser)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one)))
        return
    widths = [int(float(w)) for w in args.widths.split(",")]
    runs: dict[int, list[dict[str, float]]] = {}
    for width in widths:
        for repeat in range(args.repeats):
            done = subprocess.run(
                [sys.executable, __file__, "--one", str(width)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                print(f"width {width}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
                break
            runs.setdefault(width, []).append(json.loads(done.stdout.splitlines()[-1]))
            print(f"width {width} run {repeat + 1}: {runs[width][-1]}", file=sys.stderr)
    lines = [
        "# Places streams at scale (issue 29)",
        "",
        (
            f"Command: `.venv/bin/python benchmarks/places_scale.py --widths {args.widths} "
            f"--repeats {args.repeats}`. Median (min-max) of {args.repeats} runs, each width "
            "in a fresh process; nation -> 50 states -> counties, fda, horizon 8, 1,000 events "
            "per period, revision every 4 periods; 2-core shared machine, Python 3.11."
        ),
        "",
        (
            "| counters | build s | period close s | records to JSON s | revision extra s | "
            "secure noise s | peak RSS MiB |"
        ),
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for width, rows in runs.items():
        secure = _spread([r["secure_noise"] for r in rows])
        lines.append(
            f"| {width:,} | {_spread([r['build'] for r in rows])} | "
            f"{_spread([r['close'] for r in rows])} | {_spread([r['json'] for r in rows])} | "
            f"{_spread([r['revision'] for r in rows])} | {secure} | "
            f"{_spread([r['peak_rss_mib'] for r in rows])} |"
        )
    lines += [
        "",
        (
            "Period close = one period's node noise (seeded sampler) and release records for "
            "every counter; production adds the secure noise column (OpenDP's exact discrete "
            "Laplace, one sample per counter per close)."
        ),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = output_dir(args.write)
    (out / "places_scale.md").write_text(text, encoding="utf-8")
    (out / "places_scale.json").write_text(json.dumps(runs, indent=1), encoding="utf-8")
    _plot(runs, out)


def _plot(runs: dict[int, list[dict[str, float]]], out: object) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    widths = sorted(runs)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for key, label in (
        ("close", "period close (seeded noise, records)"),
        ("json", "records to JSON"),
        ("revision", "revision (tree projection)"),
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
