"""Bad input lands in the dead letters with its reason while every good event is counted; no
raw (un-noised) count appears in any output, summary, log line or error message."""

from __future__ import annotations

import json
import logging
import re
from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine_support import releases

from streamdp.cli import main
from streamdp.engine import REASONS, Engine
from streamdp.engine.events import RejectedError, decode
from streamdp.engine.periods import PeriodClock, parse_instant
from streamdp.engine.replay import read_jsonl, replay
from streamdp.synth import example_spec, generate, release_instant


class ZeroSampler:
    """No noise at all (test only): releases then equal the engine's true counts."""

    name = "test-zero"
    secure = False

    def discrete_laplace(self, scale: float, size: int, *, label: str = "") -> np.ndarray:
        return np.zeros(size, dtype=np.int64)


class FarSampler:
    """Noise M * (call number): never zero and never cancelling, so a released value equal to
    a raw count can only be a leak."""

    name = "test-far"
    secure = False

    def __init__(self) -> None:
        self.calls = 0

    def discrete_laplace(self, scale: float, size: int, *, label: str = "") -> np.ndarray:
        self.calls += 1
        return np.full(size, 10_000_019 * self.calls, dtype=np.int64)


@pytest.mark.parametrize(("scenario", "periods"), [("restaurant", 40), ("hospital", 75)])
def test_bad_records_dead_lettered_with_reason_and_good_events_all_counted(
    scenario, periods
) -> None:
    spec = example_spec(scenario)
    lines = list(generate(scenario, periods, 20, seed=2, bad_fraction=0.15))
    as_of = release_instant(spec, periods)
    engine = Engine(spec, sampler=ZeroSampler(), batch=True)
    engine.start_batch(as_of)
    by_line: list[list] = []
    for line in lines:
        result = engine.ingest(line.text)
        by_line.append([d.reason for d in result.dead_letters])
    outputs = engine.advance_clock(as_of)
    kinds = set()
    for line, reasons in zip(lines, by_line, strict=True):
        if line.expect is None:
            assert reasons == [], line.text
        else:
            assert line.expect in reasons, (line.expect, reasons, line.text)
            kinds.add(line.expect)
    assert len(kinds) >= 9
    assert kinds <= set(REASONS)

    # every good event counted: zero noise, so the final running totals are the true totals
    good = [json.loads(line.text) for line in lines if line.expect is None]
    good = [g for g in good if g.get("type") != "control"]
    for name, stream in spec.streams.items():
        clock = PeriodClock(stream.period)
        released = [r for r in releases(outputs) if r.stream == name]
        last_period = max(r.period for r in released)
        closed_end = clock.bounds(last_period - 1)[1]
        truth: Counter[str] = Counter()
        for g in good:
            if parse_instant(g["event_time"]) >= closed_end:
                continue
            if "items" in g:
                truth.update(g["items"])
            elif stream.counters.kind == "flag":
                truth[stream.counters.flag_counter] += int(g["attributes"]["hiv_positive"])
            else:
                truth["total"] += 1
        finals = {r.counter: r.noisy_total for r in released if r.period == last_period}
        for counter, value in truth.items():
            assert finals[counter] == value, (name, counter)
        assert sum(truth.values()) > 0


def test_no_raw_count_in_outputs_summary_logs_or_messages(tmp_path, caplog, capsys) -> None:
    """True monthly HIV+ counts are distinctive (4817, 2311; running total 7128)."""
    spec_path = tmp_path / "hiv.toml"
    spec_text = (
        __import__("importlib.resources", fromlist=["files"])
        .files("streamdp")
        .joinpath("examples", "hiv.toml")
        .read_text("utf-8")
    )
    spec_path.write_text(spec_text)
    rng = np.random.default_rng(0)
    rows = []
    for month, (positives, negatives) in enumerate([(4817, 301), (2311, 95)], start=1):
        for k in range(positives + negatives):
            rows.append(  # noqa: PERF401
                {
                    "event_id": f"{month}-{k}",
                    "event_time": f"2024-0{month}-{int(rng.integers(1, 28)):02d}T10:00:00Z",
                    "attributes": {"hiv_positive": k < positives},
                }
            )
    rows.append({"event_id": "x", "event_time": "2024-01-03T00:00:00Z", "attributes": {}})
    lines = [json.dumps(r) for r in rows]
    lines.append(json.dumps(rows[-2]))  # a true duplicate (a producer's retry) of a counted row
    lines.append("not json at all")
    lines.append(
        json.dumps(
            {
                "type": "control",
                "action": "close",
                "stream": "hiv-monthly",
                "through": "2024-03-01T00:00:00Z",
            }
        )
    )
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(lines) + "\n")
    secrets = {4817, 2311, 7128}

    caplog.set_level(logging.DEBUG)
    sampler = FarSampler()
    out = tmp_path / "out"
    summary = replay(
        __import__("streamdp.engine", fromlist=["load_spec"]).load_spec(spec_path),
        events,
        out,
        as_of=parse_instant("2024-03-03T00:00:00Z"),
        sampler=sampler,
    )
    assert sampler.calls == 2
    texts = [summary.render(), caplog.text]
    texts += [
        (out / name).read_text()
        for name in ("releases.jsonl", "consistent.jsonl", "dead_letter.jsonl", "ledger.jsonl")
    ]
    released = read_jsonl(out / "releases.jsonl")
    assert len(released) == 2
    for record in released:  # the engine did count them (noise is known here) ...
        assert record["noisy_total"] % 10_000_019 in {7128 % 10_000_019, 4817}
        # ... but no released number is a raw count
        assert record["noisy_count"] not in secrets
        assert record["noisy_total"] not in secrets
    dead = read_jsonl(out / "dead_letter.jsonl")
    assert {d["reason"] for d in dead} == {
        "schema_violation",
        "duplicate_event",
        "malformed",
        "control_on_input",
    }
    texts += [d["message"] for d in dead]

    # the CLI path: summary on stdout, warnings on stderr
    code = main(
        [
            "replay",
            "--config",
            str(spec_path),
            "--input",
            str(events),
            "--output-dir",
            str(tmp_path / "cli"),
            "--insecure-seed",
            "5",
            "--as-of",
            "2024-03-03T00:00:00Z",
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    texts += [captured.out, captured.err]
    assert "events accepted" not in captured.out  # raw record counts only when asked
    assert "replayed in" not in captured.out  # the run time grows with the records read
    assert "record counts and run time hidden" in captured.out
    assert "replayed in" in summary.render(show_counts=True)
    # error path: replaying into the same directory is refused, message without counts
    code = main(
        [
            "replay",
            "--config",
            str(spec_path),
            "--input",
            str(events),
            "--output-dir",
            str(tmp_path / "cli"),
            "--insecure-seed",
            "5",
            "--as-of",
            "2024-03-03T00:00:00Z",
        ]
    )
    assert code == 2
    captured = capsys.readouterr()
    assert "spend the budget" in captured.err
    texts += [captured.out, captured.err]
    numbers = defaultdict(int)
    for text in texts:
        for token in re.findall(r"(?<![\d.])\d+(?![\d.])", text):
            numbers[int(token)] += 1
    leaked = secrets & set(numbers)
    assert not leaked, leaked


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None)
@given(
    value=_json_values,
    before=st.sampled_from(["", " ", "\n\t", "x", "["]),
    after=st.sampled_from(["", " ", "\r\n", "x", "}", ",1", "{}"]),
)
def test_the_fast_json_path_accepts_and_refuses_exactly_what_json_loads_does(
    value: object, before: str, after: str
) -> None:
    text = before + json.dumps(value) + after

    def no_constants(name: str) -> object:  # NaN and Infinity are refused as malformed
        raise ValueError(name)

    try:
        parsed = json.loads(text, parse_constant=no_constants)
        expected: object = parsed if isinstance(parsed, dict) else "malformed"
    except ValueError:
        expected = "malformed"
    try:
        got: object = decode(text.encode())
    except RejectedError as rejected:
        got = rejected.reason  # "malformed" is the only reason decode gives
    assert got == expected
