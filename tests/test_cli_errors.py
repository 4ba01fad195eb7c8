"""Commands answer bad input with one line and exit status 2, never a traceback (issue 14)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamdp import synth_cli
from streamdp.cli import main
from streamdp.engine.spec_loading import parse_spec
from streamdp.engine.stream_table import MAX_HORIZON
from streamdp.errors import ConfigError
from streamdp.synth import Line, generate


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["plan", "--mechanism", "binary", "--objective", "minimax", "--horizon", "10",
             "--epsilon", "1", "--sensitivity", "1"],
            "--objective minimax does not apply to --mechanism binary",
        ),
        (
            ["plan", "--mechanism", "naive", "--objective", "count", "--horizon", "10",
             "--sensitivity", "1", "--epsilon", "1"],
            "--objective count does not apply to --mechanism naive (its weights are fixed)",
        ),
        (
            ["plan", "--mechanism", "fda", "--objective", "count", "--horizon", "10",
             "--sensitivity", "1", "--epsilon", "1"],
            "--objective count does not apply to --mechanism fda; it takes total or minimax",
        ),
        (["plan", "--epsilon", "1"], "--horizon is required (or --config SPEC.toml"),
        (["plan", "--horizon", "10", "--epsilon", "1"], "--sensitivity is required: the most"),
        (
            ["plan", "--horizon", "10", "--sensitivity", "1"],
            "--epsilon is required (or --target-std COUNTS",
        ),
        (
            ["plan", "--horizon", "10", "--sensitivity", "1", "--epsilon", "1",
             "--target-std", "3"],
            "--target-std finds the epsilon; drop --epsilon",
        ),
        (
            ["plan", "--horizon", "10", "--sensitivity", "1", "--target-std", "-3"],
            "the target standard deviation must be a number > 0, got -3.0",
        ),
        (
            ["plan", "--config", "streamdp/examples/demo.toml", "--horizon", "10"],
            "--config plans each stream with the spec's own values; drop --horizon",
        ),
        (
            ["plan", "--config", "/nonexistent/spec.toml"],
            "cannot read configuration '/nonexistent/spec.toml'",
        ),
        (
            ["synth", "--scenario", "hiv", "--periods", "2", "--rate", "1", "--output",
             "/nonexistent/dir/x.jsonl"],
            "directory '/nonexistent/dir' does not exist",
        ),
        (
            ["replay", "--config", "streamdp/examples/hiv.toml", "--input", "x.jsonl",
             "--output-dir", "out", "--as-of", "yesterday"],
            "--as-of 'yesterday' is not an instant",
        ),
        (
            ["replay", "--config", "streamdp/examples/hiv.toml", "--input", "x.jsonl",
             "--output-dir", "out"],
            "the instant it printed ('every generated period is released by:",
        ),
        (
            ["produce", "--scenario", "hiv", "--write-spec", "live.toml", "--bootstrap",
             "127.0.0.1:9092"],
            "--write-spec writes a spec and exits without sending anything: drop --bootstrap",
        ),
        # an audit of 2026-11-28: tracebacks on these (NaN to int, an overflowing variance)
        (
            ["plan", "--horizon", "365", "--epsilon", "1", "--sensitivity", "nan"],
            "--sensitivity must be a number from 1 to 2^40, got nan",
        ),
        (
            ["plan", "--horizon", "365", "--epsilon", "1", "--sensitivity", "inf", "--compare"],
            "--sensitivity must be a number from 1 to 2^40, got inf",
        ),
        (
            ["plan", "--rho", "0.5", "--horizon", "10", "--sensitivity", "1e200"],
            "--sensitivity must be a number from 1 to 2^40, got 1e+200",
        ),
        (
            ["plan", "--compare", "--horizon", "10", "--epsilon", "1", "--delta", "1e-6",
             "--sensitivity", "5", "--l2-sensitivity", "7"],
            "--l2-sensitivity 7 is above the L1 bound --sensitivity 5",
        ),
        (
            ["plan", "--rho", "1e-300", "--horizon", "365", "--sensitivity", "1"],
            "outside the sampler's safe range [2^-40, 2^40]; raise rho",
        ),
        (
            ["plan", "--rho", "1e300", "--horizon", "365", "--sensitivity", "1"],
            "outside the sampler's safe range [2^-40, 2^40]; lower rho",
        ),
        # options that were silently ignored (the same audit)
        (
            ["plan", "--rho", "0.5", "--horizon", "10", "--sensitivity", "1", "--noise",
             "discrete-laplace"],
            "--rho plans a zCDP counter with discrete Gaussian noise; drop --noise",
        ),
        (
            ["plan", "--config", "streamdp/examples/census_zcdp.toml", "--noise", "laplace"],
            "--noise applies to pure-epsilon streams; every stream of",
        ),
        (
            ["replay", "--config", "streamdp/examples/hiv.toml", "--input", "x.jsonl",
             "--as-of", "2024-06-01T00:00:00Z", "--check-input", "--output-dir", "out"],
            "--check-input checks the input and writes nothing: drop --output-dir",
        ),
        (
            ["replay", "--config", "streamdp/examples/hiv.toml", "--input", "x.jsonl",
             "--as-of", "2024-06-01T00:00:00Z", "--output-dir", "out", "--unit-key-file", "k"],
            "no stream of 'streamdp/examples/hiv.toml' has a privacy_unit: drop --unit-key-file",
        ),
        (
            ["worker", "--config", "streamdp/examples/hiv.toml", "--bootstrap", "127.0.0.1:1",
             "--unit-key-file", "k"],
            "no stream of 'streamdp/examples/hiv.toml' has a privacy_unit: drop it",
        ),
    ],
)  # fmt: skip
def test_bad_arguments_give_one_line_and_status_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


REPLAY = ["replay", "--config", "streamdp/examples/hiv.toml", "--as-of", "2024-06-01T00:00:00Z"]
SYNTH = ["synth", "--scenario", "hiv", "--periods", "2", "--rate", "1"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plan", "--config", "{latin1}"], "'{latin1}': it is not UTF-8 text"),
        ([*REPLAY, "--config", "{latin1}", "--input", "{events}", "--output-dir", "{tmp}/o"],
         "'{latin1}': it is not UTF-8 text"),
        (["worker", "--config", "{latin1}", "--bootstrap", "127.0.0.1:9092"],
         "'{latin1}': it is not UTF-8 text"),
        (["broker", "--config", "{latin1}"], "'{latin1}': it is not UTF-8 text"),
        # refused before a broker starts (an audit's 'a b.releases' topics and a worker
        # command line the worker refuses; flags that did nothing without --config)
        (["broker", "--config", "streamdp/examples/hiv.toml", "--topic-namespace", "a b"],
         "--topic-namespace must be a topic name prefix such as 'streamdp'"),
        (["broker", "--config", "streamdp/examples/hiv.toml", "--app-id", ""],
         "--app-id names the consumer group and prefixes the state topics"),
        (["broker", "--partitions", "4"],
         "--partitions says how to create a worker's topics, and applies only with --config"),
        (["broker", "--topic-namespace", "x", "--app-id", "y"],
         "--topic-namespace, --app-id say how to create"),
        ([*REPLAY, "--input", "{events}", "--output-dir", "README.md"],
         "--output-dir 'README.md' exists and is not a directory"),
        ([*REPLAY, "--input", "{events}", "--output-dir", "/proc/streamdp-x"],
         "--output-dir '/proc/streamdp-x' cannot be created"),
        ([*REPLAY, "--input", "{csv}", "--output-dir", "{tmp}/o"],
         "--input '{csv}' is named as comma-separated values (.csv), not JSON Lines"),
        ([*REPLAY, "--input", "{events}"],
         "--output-dir is required: the directory the releases, the ledger and the snapshot"),
        ([*SYNTH, "--output", "{tmp}"], "--output '{tmp}' is a directory; give a file name"),
        ([*SYNTH, "--output", "{tmp}/s.jsonl", "--rate", "1e12"],
         "--rate must be a number of events per period from 0 to 10,000,000, got 1e+12"),
        ([*SYNTH, "--output", "{tmp}/s.jsonl", "--data-seed", "-1"],
         "--data-seed must be an integer >= 0, got -1"),
        ([*REPLAY, "--input", "{events}", "--output-dir", "{tmp}/o", "--insecure-seed", "-1"],
         "--insecure-seed must be an integer >= 0, got -1"),
        (["worker", "--config", "streamdp/examples/hiv.toml", "--bootstrap", "127.0.0.1:9092",
          "--insecure-seed", "-1"],
         "--insecure-seed must be an integer >= 0, got -1"),
        (["demo", "--insecure-seed", "-1"], "--insecure-seed must be an integer >= 0, got -1"),
        (["tail", "--topic", "streamdp.releases", "--bootstrap", "127.0.0.1:99999"],
         "--bootstrap '127.0.0.1:99999': port 99999 is not a TCP port; give a port from 1 to"),
        (["produce", "--scenario", "hiv", "--config", "streamdp/examples/hiv.toml",
          "--bootstrap", "127.0.0.1:99999"],
         "--bootstrap '127.0.0.1:99999': port 99999 is not a TCP port"),
        # an operator audit: tracebacks (a directory, a negative seed), a spec the worker
        # refuses left on disk, flags of the other mode ignored, a scenario the spec refuses
        (["produce", "--scenario", "hiv", "--write-spec", "{tmp}"],
         "--write-spec '{tmp}' is a directory; give a file name"),
        (["produce", "--scenario", "hiv", "--write-spec", "{tmp}/s.toml", "--period-seconds",
          "99999999999999"],
         "--write-spec: nothing written, the spec would be refused: {tmp}/s.toml: stream"),
        (["produce", "--scenario", "hiv", "--write-spec", "{tmp}/s.toml", "--per-second", "3"],
         "drop --per-second"),
        (["produce", "--scenario", "hiv", "--config", "streamdp/examples/hiv.toml",
          "--bootstrap", "127.0.0.1:1", "--data-seed", "-1"],
         "--data-seed must be an integer >= 0, got -1"),
        (["produce", "--scenario", "hiv", "--config", "streamdp/examples/hiv.toml",
          "--bootstrap", "127.0.0.1:1", "--period-seconds", "5"],
         "--period-seconds shapes the spec --write-spec writes"),
        (["produce", "--scenario", "hospital", "--config",
          "streamdp/examples/hospital_patients.toml", "--bootstrap", "127.0.0.1:1"],
         "refuses every hospital event (schema_violation: field 'patient_id'"),
        (["feed", "--bootstrap", "127.0.0.1:99999"],
         "--bootstrap '127.0.0.1:99999': port 99999 is not a TCP port"),
        (["plan", "--config", "{huge}"],
         "stream 's': field 'sensitivity': the contribution bound 2000000000000"),
        (["plan", "--horizon", "10000001", "--epsilon", "1", "--sensitivity", "1"],
         "horizon 10000001 exceeds 10,000,000, the most a stream spec accepts"),
    ],
)  # fmt: skip
def test_bad_files_and_values_give_one_line_and_status_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Audit item 5: each of these printed a traceback (or, for the demo, failed only after
    starting its broker). A refused command leaves no output behind."""
    files = {
        "latin1": tmp_path / "spec.toml",
        "events": tmp_path / "events.jsonl",
        "csv": tmp_path / "events.csv",
        "huge": tmp_path / "huge.toml",
    }
    files["huge"].write_text(
        '[sources.a]\nkind = "person"\nepsilon_cap = 1.0\n[streams.s]\nsource = "a"\n'
        "epsilon = 1.0\nsensitivity = 2000000000000\nhorizon = 12\n"
        'period = { unit = "month", timezone = "UTC", start = "2024-01-01" }\n'
        'counters = { kind = "flag", field = "f", name = "c" }\n'
    )
    files["latin1"].write_bytes(b'# d\xe9j\xe0 vu\n[sources.a]\nkind = "person"\n')
    files["events"].write_text('{"event_id": "a"}\n')
    files["csv"].write_text("event_id,event_time\na,2024-01-02T00:00:00Z\n")
    names = {name: str(path) for name, path in files.items()} | {"tmp": str(tmp_path)}
    before = set(tmp_path.iterdir())
    assert main([arg.format(**names) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert message.format(**names) in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert set(tmp_path.iterdir()) == before


def test_synth_removes_its_output_when_it_fails_midway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def failing(*args: object, **kwargs: object) -> Iterator[Line]:
        yield Line('{"event_id": "a"}', None)
        raise ConfigError("generation failed")

    monkeypatch.setattr(synth_cli, "generate", failing)
    target = tmp_path / "events.jsonl"
    assert main([*SYNTH, "--output", str(target)]) == 2
    assert "generation failed" in capsys.readouterr().err
    assert not target.exists()


def test_synth_output_dash_writes_the_events_to_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*SYNTH, "--output", "-"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines == [line.text for line in generate("hiv", 2, 1.0)]
    assert all(json.loads(line)["event_id"] for line in lines)
    assert "records to stdout" in captured.err
    assert list(tmp_path.iterdir()) == []  # no file named "-"


def test_plan_and_a_spec_refuse_the_same_horizons(capsys: pytest.CaptureFixture[str]) -> None:
    too_long = str(MAX_HORIZON + 1)
    assert main(["plan", "--horizon", too_long, "--epsilon", "1", "--sensitivity", "1"]) == 2
    assert f"horizon {too_long} exceeds" in capsys.readouterr().err
    spec = (
        '[sources.a]\nkind = "person"\nepsilon_cap = 1.0\n[streams.s]\nsource = "a"\n'
        f"epsilon = 1.0\nsensitivity = 1\nhorizon = {too_long}\n"
        'period = { unit = "month", timezone = "UTC", start = "2024-01-01" }\n'
        'counters = { kind = "flag", field = "f", name = "c" }\n'
    )
    with pytest.raises(ConfigError, match="'horizon'"):
        parse_spec(spec)


def test_run_bench_without_a_name_lists_the_benchmarks() -> None:
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [str(root / "run"), "bench"], cwd=root, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("usage: ./run bench NAME [ARGS]")
    listed = {line.strip() for line in done.stderr.splitlines()[2:]}
    assert "engine_throughput" in listed
    assert "results_dir" not in listed  # a helper module, not a program
    assert "line" not in done.stderr  # no bash "line 74: 1: ..." diagnostics
