"""The feed states privacy loss honestly (audit F1): streams reading one input source compose.

- each release names its source, and ``feed.json`` gives per source what one event (or one
  privacy unit) can lose across all its streams: the sum of the streams' per-epoch budgets
  (epsilon, or rho under zCDP with its (epsilon, delta)), and for a unit over the streams'
  lives the sum over every epoch of every stream; expected figures come from the spec's
  budgets, never from the feed's code;
- on the page (chromium), the per-stream figure says it is this stream alone, per event or per
  unit, and the event-level wording never claims to protect a person with several events.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from streamdp.engine.replay import read_jsonl, replay
from streamdp.feed.model import FeedView
from streamdp.feed.page import render_page
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec, generate, release_instant
from tests.test_feed import EXAMPLES, _browse, _chromium

PERIODS = 40


def _replayed_view(scenario: str, work: Path) -> tuple[FeedView, Any]:
    spec = example_spec(scenario)
    events = work / "events.jsonl"
    lines = [line.text for line in generate(scenario, PERIODS, 10.0, seed=5, spec=spec)]
    events.write_text("".join(text + "\n" for text in lines), encoding="utf-8")
    out = work / "out"
    replay(
        spec, events, out, as_of=release_instant(spec, PERIODS), sampler=InsecureSeededSampler(2)
    )
    view = FeedView()
    for name, kind in (("releases.jsonl", "release"), ("consistent.jsonl", "consistent")):
        for record in read_jsonl(out / name):
            view.add(record, kind)
    return view, spec


@pytest.mark.parametrize("scenario", ["hospital", "hospital-patients"])
def test_a_sources_streams_add_up_to_what_one_event_or_patient_can_lose(
    scenario: str, tmp_path: Path
) -> None:
    """hospital.toml: one admission feeds both streams (0.5 + 0.5 = the source's cap, 1.0);
    hospital_patients.toml: one patient likewise loses 1.0 per epoch of each stream."""
    view, spec = _replayed_view(scenario, tmp_path)
    document = view.document("test")
    (source,) = spec.sources.values()
    readers = sorted(n for n, s in spec.streams.items() if s.source == source.name)
    assert len(readers) == 2
    expected = float(sum(spec.streams[n].epsilon for n in readers))
    assert expected == float(source.cap) == 1.0
    (entry,) = document["sources"]
    assert entry["source"] == source.name
    assert [s["stream"] for s in entry["streams"]] == readers
    assert entry["event"] == {"epsilon": expected}
    assert {s["stream"]: s["source"] for s in document["streams"]} == dict.fromkeys(
        readers, source.name
    )
    units = {s.privacy_unit.field for s in spec.streams.values() if s.privacy_unit is not None}
    if not units:
        assert entry["unit"] is None
    else:
        (field,) = units
        # one epoch released in each stream: the lifetime sum is that epoch's sum
        assert entry["unit"] == {
            "field": field,
            "per_epoch": {"epsilon": expected},
            "lifetime": {"epsilon": expected},
        }


def _release(stream: str, epoch: int, **fields: Any) -> dict[str, Any]:
    example = json.loads((EXAMPLES / "release.json").read_text())[0]
    record = {**example, "stream": stream, "epoch": epoch, **fields}
    record["key"] = f"{stream}|{record['counter']}|{epoch}|{record['period']}"
    return {k: v for k, v in record.items() if v is not None}


def test_epochs_that_do_not_align_add_per_stream_and_a_units_life_adds_every_epoch() -> None:
    """Stream a has three epochs of 0.25 (then 0.5 after a spec change), b one of 0.1, both
    on source s; c reads source t. One event: a's largest epoch plus b's. One unit over the
    streams' lives: every epoch of both."""
    unit = {
        "field": "patient_id",
        "max_events_per_period": 1,
        "max_periods_per_epoch": 2,
        "event_sensitivity": 5,
    }
    view = FeedView()
    budgets = {("a", 0): "0.25", ("a", 1): "0.25", ("a", 2): "0.5", ("b", 0): "0.1"}
    for (stream, epoch), eps in budgets.items():
        view.add(
            _release(stream, epoch, source="s", epsilon=float(eps), privacy_unit=unit), "release"
        )
    view.add(_release("c", 0, source="t", epsilon=2.0, privacy_unit=unit), "release")
    sources = {entry["source"]: entry for entry in view.document("test")["sources"]}
    assert sorted(sources) == ["s", "t"]
    per_epoch = Decimal("0.5") + Decimal("0.1")
    life = sum(Decimal(v) for v in budgets.values())
    assert sources["s"]["event"] == {"epsilon": float(per_epoch)}
    assert sources["s"]["unit"] == {
        "field": "patient_id",
        "per_epoch": {"epsilon": float(per_epoch)},
        "lifetime": {"epsilon": float(life)},
    }
    assert sources["t"]["event"] == {"epsilon": 2.0}


def _two_zcdp_streams() -> FeedView:
    """Streams a (rho 0.3) and b (rho 0.2) of source s, one zCDP release each."""
    view = FeedView()
    for stream, rho in (("a", 0.3), ("b", 0.2)):
        view.add(
            _release(
                stream, 0, source="s", epsilon=9.9, privacy_definition="zcdp", rho=rho,
                privacy_delta=1e-10, l2_sensitivity=2.0,
            ),
            "release",
        )  # fmt: skip
    return view


def test_zcdp_streams_of_a_source_add_their_rho_stated_as_epsilon_delta_too() -> None:
    view = _two_zcdp_streams()
    (entry,) = view.document("test")["sources"]
    assert entry["definition"] == "zcdp"
    event = entry["event"]
    assert event["rho"] == 0.5
    assert event["delta"] == 1e-10
    # rho + 2 sqrt(rho ln(1/delta)) (Bun and Steinke 2016, Proposition 1.3), rounded up only
    assert event["epsilon"] == pytest.approx(0.5 + 2 * math.sqrt(0.5 * math.log(1e10)), rel=1e-12)
    assert event["epsilon"] >= 0.5 + 2 * math.sqrt(0.5 * math.log(1e10))


def test_records_written_before_releases_named_their_source_are_still_shown() -> None:
    view = FeedView()
    view.add(_release("a", 0, source=None), "release")
    document = view.document("test")
    assert document["sources"] == []
    (stream,) = document["streams"]
    assert stream["source"] is None
    assert stream["epsilon_per_epoch"] == [{"epoch": 0, "epsilon": 1.0}]


def _page_texts(page: str, tmp_path: Path) -> list[str]:
    site = tmp_path / "index.html"
    site.write_text(page, encoding="utf-8")
    dom = _browse(_chromium(), tmp_path / "profile", "--dump-dom", site.as_uri())
    return [re.sub(r"<[^>]+>", "", p) for p in re.findall(r"<p class=\"facts\"[^>]*>.*?</p>", dom)]


@pytest.mark.tool
def test_the_page_states_the_sources_loss_and_what_each_streams_figure_is(tmp_path: Path) -> None:
    view, spec = _replayed_view("hospital", tmp_path)
    texts = _page_texts(render_page(view.document("test")), tmp_path)
    joined = "\n".join(texts)
    (source,) = spec.sources
    eps = [str(spec.streams[n].epsilon) for n in sorted(spec.streams)]
    total = sum(spec.streams[n].epsilon for n in spec.streams)
    assert (
        f"Source {source}, read by admissions-census and hiv-admissions: one event is counted in "
        f"one epoch of each stream, so it can lose ε = {total.normalize()} ({' + '.join(eps)})."
    ) in joined
    assert "A person with several events can lose more." in joined
    assert (
        joined.count("Privacy loss through this stream alone (per event): epoch 0: ε = 0.5.") == 2
    )
    assert "one event in each epoch" in joined
    assert "could lose" not in joined  # the old claim for a person contributing in every epoch
    assert "person contributing" not in joined


@pytest.mark.tool
def test_the_page_states_a_patients_loss_across_the_sources_streams(tmp_path: Path) -> None:
    view, _ = _replayed_view("hospital-patients", tmp_path)
    joined = "\n".join(_page_texts(render_page(view.document("test")), tmp_path))
    assert (
        "one patient_id whose records fall in one epoch of each stream can lose ε = 1 "
        "(0.5 + 0.5); over all epochs released so far, ε = 1."
    ) in joined
    assert "Privacy loss through this stream alone (per patient_id per epoch)" in joined


@pytest.mark.tool
def test_a_zcdp_sources_parts_are_rho_parts_beside_rho(tmp_path: Path) -> None:
    """The streams' shares followed the (epsilon, delta) pair, reading as epsilon parts
    ("rho = 0.5, that is (epsilon, delta) = (9.9, 1e-10) (0.3 + 0.2)"; a feed audit)."""
    view = _two_zcdp_streams()
    joined = "\n".join(_page_texts(render_page(view.document("test")), tmp_path))
    assert "can lose \u03c1 = 0.5 (0.3 + 0.2), that is (\u03b5, \u03b4) = (" in joined
    assert ") (0.3 + 0.2)" not in joined


def _weighted_census_view(weights: tuple[int, ...]) -> tuple[FeedView, Any]:
    """A census stream with attribute weights, four periods replayed through the engine, in
    the feed's view."""
    from streamdp.engine import Engine
    from streamdp.engine.records import ReleaseRecord
    from tests.census_fixture import weighted_census_spec

    spec = weighted_census_spec(weights)
    engine = Engine(spec, sampler=InsecureSeededSampler(3))
    for line in generate("census", 4, 20.0, spec=spec):
        engine.ingest(line.text.encode())
    view = FeedView()
    for record in engine.advance_clock(release_instant(spec, 4)):
        if isinstance(record, ReleaseRecord):
            view.add(json.loads(record.to_json()), "release")
    return view, spec


def test_the_feed_says_how_a_stream_with_budget_groups_splits_its_budget(
    tmp_path: Path,
) -> None:
    """Census weights 1, 1, 2, 4, 8 (total, sex, race, age, cells): ``budget_groups`` lists
    the five groups in declared order with shares w / 16 (from the weights, not from the
    feed) and each group's counters (from the spec's attributes); a stream without weights
    has none."""
    weights = (1, 1, 2, 4, 8)
    view, spec = _weighted_census_view(weights)
    (stream,) = spec.streams.values()
    (shown,) = view.document("test")["streams"]
    groups = shown["budget_groups"]
    assert [g["share"] for g in groups] == [w / sum(weights) for w in weights]
    levels = [len(a.categories) for a in stream.counters.attributes]
    assert [g["counters"] for g in groups] == [1, *levels, math.prod(levels)]
    assert sum(g["counters"] for g in groups) == stream.counters.width
    assert len({g["name"] for g in groups}) == len(weights)
    plain, _ = _replayed_view("hospital", tmp_path)
    assert all(s["budget_groups"] == [] for s in plain.document("test")["streams"])


@pytest.mark.tool
def test_the_page_states_each_budget_groups_share(tmp_path: Path) -> None:
    weights = (1, 1, 2, 4, 8)
    view, _ = _weighted_census_view(weights)
    document = view.document("test")
    joined = "\n".join(_page_texts(render_page(document), tmp_path))
    (shown,) = document["streams"]
    parts = [
        f"{g['name']} {100 * w / sum(weights):g}% ({g['counters']:,} counter"
        + ("" if g["counters"] == 1 else "s")
        + ")"
        for g, w in zip(shown["budget_groups"], weights, strict=True)
    ]
    assert (
        "The budget is split between groups of counters, each spending its share of the "
        f"stream's ε: {', '.join(parts)}."
    ) in joined


@pytest.mark.tool
def test_a_source_read_by_insecure_streams_says_its_loss_does_not_hold(tmp_path: Path) -> None:
    """Each stream drawn with a test sampler carried a warning, but "Privacy loss by source"
    still stated epsilon as if it held (a feed audit)."""
    view = FeedView()
    view.add(_release("a", 0, source="s", noise_secure=False), "release")
    joined = "\n".join(_page_texts(render_page(view.document("test")), tmp_path))
    assert (
        "NOT PRIVATE: a drew its noise with a test sampler, so these figures do not hold" in joined
    )
    secure = FeedView()
    secure.add(_release("a", 0, source="s", noise_secure=True), "release")
    (tmp_path / "secure").mkdir()
    assert "NOT PRIVATE" not in "\n".join(
        _page_texts(render_page(secure.document("test")), tmp_path / "secure")
    )
