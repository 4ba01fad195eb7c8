"""The page script's own logic, run in chromium (headless) on a page the feed rendered: period
labels (audit F6), chart ticks (F7) and the rounding of what is shown (F8).

Each test renders a real page, appends a script that calls the page's functions and leaves
their results as JSON on the body, and reads them back from chromium's DOM dump. Expected
values come from the periods' own dates (the engine's clock, Python's calendar) and from the
definitions, never from the script under test.
"""

from __future__ import annotations

import html
import json
import math
import re
from datetime import datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from streamdp.engine.periods import PeriodClock
from streamdp.engine.spec import PeriodSpec
from streamdp.feed.model import FeedView
from streamdp.feed.page import render_page
from tests.page_probe import with_probe
from tests.test_feed import EXAMPLES, _browse, _chromium


def evaluate(
    tmp_path: Path,
    expression: str,
    document: dict[str, Any] | None = None,
    width: int = 1200,
    *,
    after_layout: bool = False,
) -> Any:
    """The JSON value of ``expression`` (JavaScript) evaluated in the rendered page, after
    its own script ran, in a window ``width`` pixels wide; with ``after_layout``, once the page
    was laid out and its resize observers ran (a second later, in the browser's virtual
    time)."""
    page = render_page(document or FeedView().document("test"))
    run = (
        "() => { document.body.dataset.out = JSON.stringify((() => {"
        f"return {expression};"
        "})()); }"
    )
    probe = (
        f"<script>setTimeout({run}, 1000);</script>"
        if after_layout
        else f"<script>({run})();</script>"
    )
    path = tmp_path / "probe.html"
    path.write_text(with_probe(page, probe), encoding="utf-8")
    dom = _browse(
        _chromium(), tmp_path / "profile", f"--window-size={width},900", "--dump-dom", path.as_uri()
    )
    found = re.search(r'data-out="([^"]*)"', dom)
    assert found is not None, dom[-3000:]
    return json.loads(html.unescape(found.group(1)))


def _bounds(unit: str, start: str, timezone: str, index: int, length: int = 0) -> dict[str, str]:
    """Period ``index`` of a stream, as its releases state it (the engine's own clock)."""
    clock = PeriodClock(PeriodSpec(unit, start, timezone, length))  # type: ignore[arg-type]
    begin, end = clock.bounds(index)
    return {"period_start": clock.iso(begin), "period_end": clock.iso(end)}


@pytest.mark.tool
def test_periods_are_labelled_by_their_own_local_dates(tmp_path: Path) -> None:
    day = 86400
    cases = [
        # a London October is 745 h (the clock goes back): one month, not "Oct to Oct"
        ("month", _bounds("month", "2024-01-01", "Europe/London", 9), "Oct 2024"),
        ("month", _bounds("month", "2024-01-01", "Europe/London", 2), "Mar 2024"),  # 743 h
        ("month", _bounds("month", "2024-01-01", "America/New_York", 0), "Jan 2024"),
        # fixed 31-day periods are not calendar months, whatever their dates
        ("fixed", _bounds("fixed", "2024-01-15T00:00:00Z", "UTC", 0, 31 * day),
         "2024-01-15 to 2024-02-14"),
        ("fixed", _bounds("fixed", "2024-01-01T00:00:00Z", "UTC", 0, 31 * day),
         "2024-01-01 to 2024-01-31"),
        ("fixed", _bounds("fixed", "2024-02-01T00:00:00Z", "UTC", 0, 28 * day),
         "2024-02-01 to 2024-02-28"),
        # a calendar day of 23 h (New York springs forward) is one day
        ("day", _bounds("day", "2024-03-10", "America/New_York", 0), "2024-03-10"),
        ("day", _bounds("day", "2024-10-27", "Europe/London", 0), "2024-10-27"),  # 25 h
        # a fixed day that starts at 13:00 runs into the next date
        ("fixed", _bounds("fixed", "2024-03-05T13:00:00Z", "UTC", 0, day),
         "2024-03-05 13:00 to 2024-03-06 13:00"),
        ("fixed", _bounds("fixed", "2024-03-05T13:00:00Z", "UTC", 0, 3600),
         "2024-03-05 13:00 to 14:00"),
        ("fixed", _bounds("fixed", "2024-03-04T00:00:00Z", "UTC", 0, 7 * day),
         "2024-03-04 to 2024-03-10"),
    ]  # fmt: skip
    october = cases[0][1]
    hours = (
        datetime.fromisoformat(october["period_end"]).timestamp()
        - datetime.fromisoformat(october["period_start"]).timestamp()
    ) / 3600
    assert hours == 745  # the audit's case: the clock goes back in October
    assert october["period_start"] == "2024-10-01T00:00:00+01:00"
    calls = ", ".join(f"periodLabel({json.dumps(p)}, {json.dumps(u)})" for u, p, _ in cases)
    shown = evaluate(tmp_path, f"[{calls}]")
    assert shown == [label for _, _, label in cases]


@pytest.mark.tool
def test_records_without_a_period_unit_are_labelled_by_their_dates(tmp_path: Path) -> None:
    october = _bounds("month", "2024-01-01", "Europe/London", 9)
    quarter = {
        "period_start": "2024-01-01T00:00:00+00:00",
        "period_end": "2024-04-01T00:00:00+00:00",
    }
    shown = evaluate(
        tmp_path, f"[periodLabel({json.dumps(october)}), periodLabel({json.dumps(quarter)})]"
    )
    assert shown == ["Oct 2024", "Jan 2024 to Mar 2024"]


def test_the_page_data_carries_each_streams_period_unit() -> None:
    example = json.loads((EXAMPLES / "release.json").read_text())[0]
    view = FeedView()
    view.add({**example, "period_unit": "month"}, "release")
    view.add({**example, "stream": "old", "period_unit": None}, "release")
    units = {s["stream"]: s["period_unit"] for s in view.document("test")["streams"]}
    assert units == {example["stream"]: "month", "old": None}


def _nice_ticks(lo: Fraction, hi: Fraction) -> tuple[Fraction, list[Fraction]]:
    """The reference: over every nice step (1, 2, 2.5, 5 x 10^k), exactly, the largest whose
    multiples in [lo, hi] are at least 3."""
    steps = sorted(
        (Fraction(m) * Fraction(10) ** k for m in ("1", "2", "2.5", "5") for k in range(-4, 9)),
        reverse=True,
    )
    for step in steps:
        first = math.ceil(lo / step)
        values = [k * step for k in range(first, math.floor(hi / step) + 1)]
        if len(values) >= 3:
            return step, values
    raise AssertionError("no nice step")


@pytest.mark.tool
def test_chart_axes_get_at_least_three_ticks_at_a_nice_step(tmp_path: Path) -> None:
    spans = [
        ("-420", "399"), ("0", "100"), ("0", "1"), ("5", "6"), ("-3", "7"), ("-0.4", "2.2"),
        ("12345", "13000"), ("0", "1000000"), ("-5", "5"), ("-1", "0"), ("-97", "1203"),
    ]  # fmt: skip
    calls = ", ".join(f"ticks({lo}, {hi})" for lo, hi in spans)
    shown = evaluate(tmp_path, f"[{calls}].map(t => [t.step, t.values, tickDigits(t.step)])")
    for (lo, hi), (step, values, digits) in zip(spans, shown, strict=True):
        expected_step, expected = _nice_ticks(Fraction(lo), Fraction(hi))
        assert step == pytest.approx(float(expected_step), rel=1e-12), (lo, hi)
        assert values == pytest.approx([float(v) for v in expected], rel=1e-9, abs=1e-12)
        assert 3 <= len(values) <= 6, (lo, hi, values)
        # labels print the step exactly: 250 with none, 2.5 with one, 0.25 with two
        decimals = str(float(expected_step)).partition(".")[2].rstrip("0")
        assert digits == len(decimals), step
    assert shown[0][1] == [-250, 0, 250]  # the audit's span: 500 left one tick, "0"


def _rounding_view() -> tuple[FeedView, float, float]:
    """One release whose 95% half-width is 10.2 exactly as the page computes it (nearest: 10,
    too narrow), of a stream with a unit of 1 record a period and 1 revised period."""
    from streamdp.error_band import LAPLACE_95_SD

    example = json.loads((EXAMPLES / "release.json").read_text())[0]
    sd = 9.2 / LAPLACE_95_SD
    unit = {"field": "patient_id", "max_events_per_period": 1, "max_periods_per_epoch": 1,
            "event_sensitivity": 1}  # fmt: skip
    view = FeedView()
    view.add({**example, "count_std": sd, "total_std": sd, "privacy_unit": unit}, "release")
    fair = json.loads((EXAMPLES / "consistent.json").read_text())[0]
    view.add({**fair, "periods_covered": 1}, "consistent")
    return view, sd, LAPLACE_95_SD * sd + 1


@pytest.mark.tool
def test_half_widths_are_rounded_outward_wherever_shown(tmp_path: Path) -> None:
    view, _, width = _rounding_view()
    assert 10.19 < width < 10.21
    outward = math.ceil(width)  # 11; to nearest it would be 10, a band 0.2 too narrow
    example = json.loads((EXAMPLES / "release.json").read_text())[0]
    shown = evaluate(
        tmp_path,
        '["td.count", "td.total", "svg title"].map(q => document.querySelector(q).textContent)'
        ".concat([up(2.0000001, 0), up(3, 0), up(0.25, 1), up(7.28614, 3), up(1.5, 6)])",
        view.document("test"),
    )
    cells, rounding = shown[:-5], shown[-5:]
    count, total = example["noisy_count"], example["noisy_total"]
    assert cells[:2] == [f"{count} ± {outward}", f"{total:,} ± {outward}"]
    # the chart's point says what the table says: no decimal where the table has none
    assert cells[2:] == [f"{example['period_start'][:10]}: {count} ± {outward}"]
    assert rounding == ["3", "3", "0.3", "7.287", "1.5"]


@pytest.mark.tool
def test_counts_in_words_are_singular_for_one(tmp_path: Path) -> None:
    view, _, _ = _rounding_view()
    text = evaluate(tmp_path, 'document.getElementById("streams").textContent',
                    view.document("test"))  # fmt: skip
    assert "at most 1 period of an epoch, at most 1 record a period" in text
    # and how the sensitivity follows: M = 1 x max(1, 2) (a feed audit could not re-derive a
    # unit stream's sensitivity with one period an epoch)
    assert "times 2 = 1 \u00d7 2 records (one period an epoch counts as two" in text
    assert "covering 1 period (constraint" in text
    assert "1 records" not in text
    assert "1 periods" not in text


@pytest.mark.tool
def test_a_value_rounding_to_zero_is_never_shown_negative(tmp_path: Path) -> None:
    """The audit's census zCDP table showed "-0 ± 9": a real-valued release of -0.3."""
    calls = [(-0.3, 0), (-0.04, 1), (-0.0, 0), (-0.5, 0), (-0.6, 0), (-0.05, 1), (0.2, 0),
             (-1234.4, 0), (-0.0004, 3)]  # fmt: skip
    shown = evaluate(tmp_path, "[" + ", ".join(f"num({v!r}, {d})" for v, d in calls) + "]")
    assert shown == ["0", "0", "0", "-1", "-1", "-0.1", "0", "-1,234", "0"]


@pytest.mark.tool
def test_a_real_valued_release_is_shown_to_a_decimal_an_integer_as_itself(tmp_path: Path) -> None:
    """A BLT release of 486.6 read "487" beside its consistent revision "486.6", which the
    docs say repeats it: two estimates where there is one (a feed audit)."""
    calls = [486.6, 11784.8, 487, -0.3, 12.0, None]
    shown = evaluate(tmp_path, "[" + ", ".join(f"released({json.dumps(v)})" for v in calls) + "]")
    assert shown == ["486.6", "11,784.8", "487", "-0.3", "12", "\u2013"]


@pytest.mark.tool
@pytest.mark.parametrize("width", [1200, 420])
def test_error_bars_and_dots_stay_inside_the_plot(tmp_path: Path, width: int) -> None:
    """The first period's bar was drawn on the y axis, its dot half over the tick labels;
    every mark of the series is now inside the plot and clipped to it."""
    points = [{"y": v, "lo": v - 9, "hi": v + 9, "label": f"p{i}", "epoch": 0}
              for i, v in enumerate([20, -3, 15, 40, 1, 33])]  # fmt: skip
    found = evaluate(
        tmp_path,
        f"(() => {{ const f = chart('t', {json.dumps(points)}, {{line: false, kind: 'counts'}});"
        "document.body.append(f);"
        "const zero = f.querySelector('line.zero'), plot = f.querySelector('g.plot');"
        "const rect = f.querySelector(`clipPath#${plot.getAttribute('clip-path').slice(5, -1)}"
        " rect`);"
        "const at = (e, k) => Number(e.getAttribute(k));"
        "return {left: at(zero, 'x1'), right: at(zero, 'x2'),"
        " clip: [at(rect, 'x'), at(rect, 'width')],"
        " bars: [...plot.querySelectorAll('line.errbar')].map(b => [at(b, 'x1'), at(b, 'x2')]),"
        " dots: [...plot.querySelectorAll('circle')].map(c => [at(c, 'cx'), at(c, 'r')]),"
        " outside: f.querySelectorAll('svg > line.errbar, svg > circle').length};"
        "})()",
        width=width,
    )
    left, right = found["left"], found["right"]
    assert found["clip"] == pytest.approx([left, right - left])
    assert found["outside"] == 0
    assert len(found["bars"]) == len(found["dots"]) == len(points)
    for (x1, x2), (cx, r) in zip(found["bars"], found["dots"], strict=True):
        assert x1 == x2 == cx
        assert left < cx - r, (left, cx, r)
        assert cx + r < right, (cx, r, right)


def _table_view(counter: str) -> FeedView:
    """One release of a counter named ``counter``."""
    example = json.loads((EXAMPLES / "release.json").read_text())[0]
    view = FeedView()
    view.add({**example, "counter": counter}, "release")
    return view


@pytest.mark.tool
@pytest.mark.parametrize(
    ("width", "counter", "scrolls"),
    [(1200, "a_counter_with_a_long_name", False), (420, "a_counter_with_a_long_name", True)],
)
def test_a_table_wider_than_the_page_says_it_scrolls(
    tmp_path: Path, width: int, counter: str, scrolls: bool
) -> None:
    """At a phone's width the latest-period table (five columns) is cut at the right edge:
    its box says so above it (and shades that edge); on a wide screen it says nothing."""
    found = evaluate(
        tmp_path,
        "[...document.querySelectorAll('#streams .table-wrap')].map(w => ["
        "w.classList.contains('scrolls'), w.scrollWidth > w.clientWidth,"
        "getComputedStyle(w, '::before').content])",
        _table_view(counter).document("test"),
        width=width,
        after_layout=True,
    )
    assert found, "no table drawn"
    for marked, wider, note in found:
        assert (marked, wider) == (scrolls, scrolls), found
        if scrolls:
            assert note == '"Scroll the table sideways for more columns \u2192"'
        else:
            assert note == "none"


@pytest.mark.tool
def test_data_as_of_says_when_a_stream_lags_the_newest(tmp_path: Path) -> None:
    """ "Data as of" took the newest stream's period end, overstating how fresh a lagging
    stream on the same page is (a feed audit)."""
    example = json.loads((EXAMPLES / "release.json").read_text())[0]
    lagging = {
        **example,
        "stream": "lagging",
        "title": "Lagging stream",
        "key": "lagging|cola|0|60",
        "period": 60,
        "period_start": "2024-02-29T00:00:00+00:00",
        "period_end": "2024-03-01T00:00:00+00:00",
    }
    view = FeedView()
    view.add(example, "release")
    view.add(lagging, "release")
    status = evaluate(
        tmp_path, 'document.getElementById("status").textContent', view.document("test")
    )
    assert status.startswith("Data as of the end of ")
    assert (
        "Not every stream is that far: the latest period of Lagging stream is 2024-02-29" in status
    )
    one = FeedView()
    one.add(example, "release")
    alone = evaluate(tmp_path, 'document.getElementById("status").textContent', one.document("t"))
    assert "Not every stream" not in alone
