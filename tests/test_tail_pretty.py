"""``streamdp tail --format pretty`` prints streamdp's records in words, not raw JSON (issue 14).

The records are the engine's own output over the demo spec and synthetic input (releases,
consistent revisions, dead letters of every kind the generator makes), serialised as the worker
publishes them; each pretty line is checked against the record's fields.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from streamdp.daemon.routing import source_spec
from streamdp.demo.feed import paced_records
from streamdp.engine import Engine, EngineSpec, parse_spec
from streamdp.engine.periods import PeriodClock
from streamdp.noise import InsecureSeededSampler
from streamdp.record_words import TailRecord, format_pretty


@pytest.fixture(scope="module")
def published() -> list[bytes]:
    text = resources.files("streamdp").joinpath("examples", "demo.toml").read_text("utf-8")
    spec: EngineSpec = parse_spec(text, origin="demo.toml")
    engine = Engine(source_spec(spec, "restaurant-orders"), sampler=InsecureSeededSampler(5))
    origin = min(PeriodClock(s.period).bounds(0)[0] for s in spec.streams.values())
    out: list[bytes] = []
    records = paced_records(
        "restaurant", spec, "restaurant-orders", rate=40.0, pace=1.0, seed=2, bad_fraction=0.1
    )
    for offset, record in enumerate(records):
        if record.due >= 9:
            break
        produced: list[Any] = engine.advance_clock(origin + record.due * 86400.0)
        result = engine.ingest(record.value, source_topic=record.topic, partition=0, offset=offset)
        produced += [*result.dead_letters, *result.outputs]
        out += [r.to_json().encode("utf-8") for r in produced]
    return out


def _pretty(value: bytes) -> str:
    return format_pretty(TailRecord("streamdp.releases", 1, 42, 1_700_000_000_000, b"k", value))


def _of_kind(published: list[bytes], kind: str) -> list[tuple[dict[str, Any], str]]:
    """Each published record of ``kind`` with its pretty line (at least one)."""
    found = [json.loads(v) for v in published if json.loads(v)["kind"] == kind]
    assert found, kind
    return [(record, _pretty(json.dumps(record).encode())) for record in found]


def test_every_streamdp_record_is_one_readable_line_not_json(published: list[bytes]) -> None:
    kinds = {json.loads(v)["kind"] for v in published}
    assert kinds == {"release", "consistent", "dead_letter"}
    for value in published:
        line = _pretty(value)
        assert line.isprintable()
        assert line.startswith("p1@42 2023-11-14T22:13:20.000000Z ")
        body = line.split(" ", 2)[2]
        assert not body.startswith(("{", '"k"')), body  # words, not the raw JSON


def test_release_lines_carry_the_records_values(published: list[bytes]) -> None:
    for record, line in _of_kind(published, "release"):
        assert f"release {record['stream']}/{record['counter']} " in line
        assert f"epoch {record['epoch']} period {record['period']} " in line
        assert f"count {record['noisy_count']:,} (sd {record['count_std']:.3g})" in line
        assert f"running total {record['noisy_total']:,} (sd {record['total_std']:.3g})" in line
        assert f"epsilon {record['epsilon']} per epoch, {record['mechanism']}" in line


def test_consistent_lines_list_every_total(published: list[bytes]) -> None:
    for record, line in _of_kind(published, "consistent"):
        assert f"revision {record['revision']} " in line
        for counter, total in record["totals"].items():
            assert f"{counter} {total:,.1f}" in line or f"{counter} {int(total):,}" in line


def test_dead_letter_lines_give_the_reason_and_leave_the_raw_record_out(
    published: list[bytes],
) -> None:
    letters = _of_kind(published, "dead_letter")
    assert len({record["reason"] for record, _ in letters}) >= 5
    for record, line in letters:
        assert line.split(" ", 2)[2].startswith(f"dead letter {record['reason']} from ")
        raw = record.get("raw") or ""
        if len(raw) >= 12:
            assert raw not in line


def test_other_json_and_odd_fields_fall_back_to_the_compact_form() -> None:
    assert _pretty(b'{"count": 3}').endswith('"k" {"count":3}')
    # a release missing fields is shown as JSON rather than half described
    assert _pretty(b'{"kind": "release", "stream": "s"}').endswith(
        '"k" {"kind":"release","stream":"s"}'
    )
    # names are printed safely even when they hold control characters
    odd = {"kind": "dead_letter", "reason": "late", "topic": "t\x1b[31m", "offset": 1}
    assert _pretty(json.dumps(odd).encode()).isprintable()


def test_a_zcdp_release_line_says_rho_and_a_unit_release_per_what_it_holds() -> None:
    """A zCDP release read as ``epsilon 7.29 per epoch``, a pure-DP budget it does not have
    (an audit); a release protecting a patient did not say so."""
    from streamdp.synth import release_instant

    text = resources.files("streamdp").joinpath("examples", "census_zcdp.toml").read_text("utf-8")
    text = text.replace(
        "\nhorizon =",
        '\nprivacy_unit = { field = "patient_id", max_events_per_period = 1, '
        "max_periods_per_epoch = 2 }\nhorizon =",
        1,
    )
    spec = parse_spec(text, origin="census_zcdp.toml")
    engine = Engine(spec, sampler=InsecureSeededSampler(5), unit_key=b"k" * 32)
    releases = [
        json.loads(r.to_json())
        for r in engine.advance_clock(release_instant(spec, 1))
        if json.loads(r.to_json())["kind"] == "release"
    ]
    assert releases
    for record in releases:
        line = _pretty(json.dumps(record).encode())
        assert (
            f"zCDP rho {record['rho']} (epsilon {record['epsilon']} at delta "
            f"{record['privacy_delta']}) per patient_id per epoch, {record['mechanism']}"
        ) in line, line
