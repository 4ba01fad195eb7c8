"""The conditions a benchmark ran under, recorded with its figures instead of stated by hand.

A results file used to say "other engineers' jobs running" whatever the truth was (a fixed
string); the README then said "nothing else running" of the same run. Now a benchmark records
the date, the commit and the load average at its start and end, and its text is built from
them; results stored before that say the conditions were not recorded.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def conditions_at_start() -> dict[str, Any]:
    """The date (UTC), the commit (with ``+dirty`` when tracked files other than the committed
    results have changes: a benchmark run after another one's ``--write`` runs the committed
    code) and the 1-minute load average before the benchmark starts its own processes."""
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
        "commit": _commit(),
        "load_average_start": round(os.getloadavg()[0], 2),
    }


def finish(conditions: dict[str, Any]) -> dict[str, Any]:
    """``conditions`` with the load average at the end (it includes the benchmark's own
    broker and workers, so read it beside the start's)."""
    return {**conditions, "load_average_end": round(os.getloadavg()[0], 2)}


def conditions_text(
    conditions: dict[str, Any] | None, own: str = "the benchmark's own broker and workers"
) -> str:
    """One sentence for a results file; ``own``: what of the benchmark's own the end's load
    average counts."""
    if not conditions:
        return (
            "2-core machine; the date, commit and load of these runs were not recorded in this "
            "file (results stored before the benchmark recorded them; the README states them)"
        )
    return (
        f"2-core machine; measured {conditions['date']} at commit {conditions['commit']}, "
        f"1-minute load average {conditions['load_average_start']:.2f} before the runs and "
        f"{conditions.get('load_average_end', float('nan')):.2f} at their end (the latter "
        f"counts {own})"
    )


def _commit() -> str:
    try:
        head = _git("rev-parse", "--short", "HEAD")
        dirty = _git(
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            ":/",
            ":(exclude,top)benchmarks/results",
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + ("+dirty" if dirty else "")


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, check=True)
    return done.stdout.strip()
