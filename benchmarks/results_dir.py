"""Where a benchmark writes its tables, JSON and plots: the committed results only when asked.

Without ``--write`` a benchmark writes into ``benchmarks/out/`` (not tracked), so a run never
leaves the repository's tree dirty; with ``--write`` it replaces the committed figures in
``benchmarks/results/``, which is what a commit that publishes new figures does.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: The committed results (read back by re-rendering commands; written with --write).
COMMITTED = HERE / "results"
#: Scratch output of runs without --write (ignored by git).
SCRATCH = HERE / "out"


def add_write_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--write`` to a benchmark's parser."""
    parser.add_argument(
        "--write",
        action="store_true",
        help="write the committed results in benchmarks/results/ (default: benchmarks/out/, "
        "not tracked)",
    )


def output_dir(write: bool) -> Path:
    """The directory to write into (created): the committed results with ``write``, else the
    untracked scratch directory."""
    target = COMMITTED if write else SCRATCH
    target.mkdir(parents=True, exist_ok=True)
    return target
