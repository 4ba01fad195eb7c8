"""The coupling check through the engine, many draws per case (issue 25, "done when").

    ./run bench coupling_engine [--draws 1000] [--write]

For every scenario of ``tests/test_privacy_float_engine.py`` (each mechanism x kind the example
specs give: combos, census hierarchy with the projection at publication, flags, places, a
source with two streams; fda, binary, naive, kary_gls, kary_digits, pure and zCDP; then the BLT
streams, ``blt:<example>``) and both paths (the file replay and the daemon's
release service): ``--draws`` times, D with seeded node noise z and D plus one random record
(counted) with the coupled noise z - R e, and every published byte compared. The table gives
the draws whose outputs were bit-identical; the power check (the same record without the
coupling moves the output) runs once per case. Seeds are fixed (crc32 of the case), so a
re-run reproduces the same draws.

Prints the table and writes coupling_engine.md (or ``--results-name``.md) to benchmarks/out/
(with ``--write``: the committed benchmarks/results/).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
from results_dir import add_write_flag, output_dir
from run_conditions import conditions_at_start, conditions_text, finish

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the draws are the test suite's own (tests/)

from tests.test_privacy_float_engine import (  # noqa: E402
    BLT_BASES,
    SCENARIOS,
    blt_coupled_draw,
    coupled_draw,
)

PATHS = ("replay", "daemon")
#: every case: the node-noise coupling's scenarios, then the BLT streams (coupled by shifting
#: the noise by the change of the encoding, see blt_coupled_draw)
CASES = [*SCENARIOS, *(f"blt:{base}" for base in BLT_BASES)]


Draw = Callable[[str, np.random.Generator, Path, bool], tuple[bool, bool | None]]


def draw_of(case: str) -> Draw:
    """The draw function of ``case``: ``(path, rng, scratch dir, power) -> (equal, moved)``."""
    if case.startswith("blt:"):
        base = case.removeprefix("blt:")
        return lambda path, rng, tmp, power: blt_coupled_draw(base, path, rng, tmp, power=power)
    return lambda path, rng, tmp, power: coupled_draw(case, path, rng, tmp, power=power)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=1000, help="draws per case (default 1000)")
    parser.add_argument(
        "--scenario", action="append", choices=CASES, help="only these (repeatable)"
    )
    parser.add_argument(
        "--results-name",
        default="coupling_engine",
        help="name of the results file (default coupling_engine: .md is added); give a run of "
        "some cases its own file",
    )
    add_write_flag(parser)
    args = parser.parse_args()
    if args.draws < 1:
        parser.error(f"--draws must be >= 1, got {args.draws}")
    scenarios = args.scenario or CASES
    chosen = "".join(f" --scenario {s}" for s in args.scenario or ())
    if args.results_name != "coupling_engine":
        chosen += f" --results-name {args.results_name}"
    conditions = conditions_at_start()
    rows = []
    started = time.perf_counter()
    failures = 0
    for scenario in scenarios:
        draw_once = draw_of(scenario)
        for path in PATHS:
            rng = np.random.default_rng(zlib.crc32(f"bench|{scenario}|{path}".encode()))
            t0 = time.perf_counter()
            equal = 0
            moved = None
            with tempfile.TemporaryDirectory() as tmp:
                for draw in range(args.draws):
                    same, shifted = draw_once(path, rng, Path(tmp) / str(draw), draw == 0)
                    equal += same
                    if shifted is not None:
                        moved = shifted
            failures += args.draws - equal
            seconds = time.perf_counter() - t0
            rows.append((scenario, path, equal, args.draws, moved, seconds))
            print(
                f"{scenario:22} {path:7} identical {equal}/{args.draws}  "
                f"power: {'moved' if moved else 'NOT MOVED'}  {seconds:.0f} s",
                flush=True,
            )
    total = time.perf_counter() - started
    measured = conditions_text(finish(conditions), own="the benchmark itself")
    lines = [
        "# Coupling through the engine: D vs D plus one record under coupled noise",
        "",
        f"Command: `./run bench coupling_engine --draws {args.draws}{chosen} --write`",
        "",
        (
            "Each draw: seeded node noise z for D, z - R e for D plus one random record (counted; "
            "BLT: z minus the record's change of the encoding, F(D') - F(D)), "
            "every published release and revision compared byte for byte. Power: the same record "
            "without the coupling changes the output (first draw of each case). Seeds fixed per "
            f"case; {total:.0f} s in all; {measured} (the figures are counts of identical "
            "draws, which load does not change)."
        ),
        "",
        "| scenario | path | draws bit-identical | power check |",
        "|---|---|---:|---|",
    ]
    lines += [
        f"| {s} | {p} | {e:,} / {n:,} | {'output moved' if m else 'output did NOT move'} |"
        for s, p, e, n, m, _ in rows
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    target = output_dir(args.write) / f"{args.results_name}.md"
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target}")
    return 1 if failures or not all(m for *_, m, _ in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
