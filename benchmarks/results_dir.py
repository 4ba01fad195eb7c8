"""Where a benchmark writes its tables, JSON and plots: the committed results only when asked.

Without ``--write`` a benchmark writes into ``benchmarks/out/`` (not tracked), so a run never
leaves the repository's tree dirty; with ``--write`` it replaces the committed figures in
``benchmarks/results/``, which is what a commit that publishes new figures does.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from run_conditions import conditions_text

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


class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy."""

    def __init__(self, terminal: TextIO) -> None:
        self.terminal = terminal
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        self.terminal.write(text)
        return self.copy.write(text)

    def flush(self) -> None:
        self.terminal.flush()


@contextlib.contextmanager
def printed_copy() -> Iterator[io.StringIO]:
    """Inside the block, what the benchmark prints also goes into the yielded buffer, so that
    the tables a results ``.txt`` file holds are the ones printed (not pasted by hand)."""
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):  # type: ignore[type-var]
        yield tee.copy


def write_json_and_tables(
    out: Path, stem: str, payload: dict[str, Any], conditions: dict[str, Any], printed: str
) -> None:
    """``<stem>.json`` (``payload`` and the run's ``conditions``) and ``<stem>.txt`` (the
    conditions in a sentence, then the tables as printed) in ``out``."""
    (out / f"{stem}.json").write_text(
        json.dumps({**payload, "conditions": conditions}, indent=1) + "\n"
    )
    (out / f"{stem}.txt").write_text(
        f"{conditions_text(conditions, own='nothing but this process')}.\n\n{printed}"
    )
    print(f"wrote {out / f'{stem}.json'} and {stem}.txt")
