"""Every benchmark program imports (its imports name things that exist).

Benchmarks run for minutes and only by hand, so a moved function breaks one silently until
the next person runs it; importing each is cheap and catches that here. Running them is not
a test (figures come from their own runs, recorded in benchmarks/results/).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
#: The project's interpreter, as the benchmarks are run (``.venv/bin/python benchmarks/x.py``).
PYTHON = REPO / ".venv" / "bin" / "python"
if not PYTHON.exists():  # another checkout layout: the interpreter running the tests
    PYTHON = Path(sys.executable)


#: Modules of benchmarks/ that are shared helpers, not programs (no main()).
HELPERS = {"results_dir", "run_conditions"}


@pytest.mark.parametrize("path", sorted(BENCHMARKS.glob("*.py")), ids=lambda p: p.stem)
def test_the_benchmark_imports(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # benchmarks import each other by name
    spec = importlib.util.spec_from_file_location(f"benchmark_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    if path.stem not in HELPERS:
        assert callable(getattr(module, "main", None)), f"{path.name} has no main()"


#: Benchmarks that write no file (nothing to guard with --write), with the reason.
WRITES_NOTHING = {
    "bare_consumer": "a helper of daemon_throughput: prints its rate, writes nothing",
    "results_dir": "the shared --write helper itself, not a benchmark",
    "run_conditions": "the shared record of a run's date, commit and load, not a benchmark",
}


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(BENCHMARKS.glob("*.py")) if p.stem not in WRITES_NOTHING],
    ids=lambda p: p.stem,
)
def test_every_benchmark_writes_the_committed_results_only_with_write(path: Path) -> None:
    """Issue 26: benchmarks overwrote benchmarks/results/ on every run (a dirty tree), and
    consistency_large.py without an argument died with IndexError. Each program's --help must
    work (exit 0) and offer --write, run as a user runs it: the project's interpreter, from the
    repository's root."""
    done = subprocess.run(
        [str(PYTHON), str(path.relative_to(REPO)), "--help"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--write" in done.stdout
    assert "benchmarks/results/" in " ".join(done.stdout.split())  # the flag's help says where


def test_consistency_large_without_a_case_is_a_usage_error() -> None:
    """Issue 26: no argument raised IndexError on sys.argv; now argparse's usage, exit 2."""
    for argv in ([], ["no-such-case"]):
        done = subprocess.run(
            [str(PYTHON), "benchmarks/consistency_large.py", *argv],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr[-2000:]
        assert done.stderr.startswith("usage: consistency_large.py")
        assert "census-fgmc" in done.stderr  # the usage lists the cases
        assert "Traceback" not in done.stderr


def test_the_shared_flag_writes_the_committed_results_only_when_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import results_dir

    monkeypatch.setattr(results_dir, "COMMITTED", tmp_path / "results")
    monkeypatch.setattr(results_dir, "SCRATCH", tmp_path / "out")
    assert results_dir.output_dir(False) == tmp_path / "out"
    assert results_dir.output_dir(True) == tmp_path / "results"
    assert (tmp_path / "out").is_dir()
    ignored = (REPO / ".gitignore").read_text().splitlines()
    assert "/benchmarks/out/" in ignored


def test_a_results_file_states_the_recorded_conditions_or_that_there_were_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Results files used to say "other engineers' jobs running" whatever ran; the text now
    comes from what the run recorded (date, commit, load average), or says nothing was."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import run_conditions

    recorded = run_conditions.finish(run_conditions.conditions_at_start())
    assert set(recorded) == {"date", "commit", "load_average_start", "load_average_end"}
    assert len(recorded["date"]) == 10
    text = run_conditions.conditions_text(recorded)
    assert f"measured {recorded['date']} at commit {recorded['commit']}" in text
    assert "other engineers" not in text
    assert "were not recorded" in run_conditions.conditions_text(None)


def test_the_printed_tables_are_the_ones_a_results_text_file_holds(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The consistency benchmarks' .txt files were terminal output pasted by hand; they are now
    written from a copy of what was printed, so the file and the terminal cannot differ."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import results_dir

    with results_dir.printed_copy() as printed:
        print("T  exact")
        print(32, 8.6e-05)
    print("after the block")
    assert printed.getvalue() == "T  exact\n32 8.6e-05\n"
    assert capsys.readouterr().out == "T  exact\n32 8.6e-05\nafter the block\n"
