"""The demo's board and feed, against the real engine's output records.

The records come from :class:`streamdp.engine.Engine` run over the demo spec and the synthetic
generator, so the board is checked against what the worker actually publishes; the printed values
are compared with the records' own fields, and the printed bounds with the formula of
docs/consuming.md (2.12 sd + 1).
"""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections import Counter
from importlib import resources
from typing import Any

import numpy as np
import pytest
from rich.cells import cell_len
from rich.console import Console

from streamdp.budget_view import BudgetView, SourceBudget
from streamdp.daemon.routing import source_spec
from streamdp.demo.board import Board
from streamdp.demo.board_view import board_header, render_board
from streamdp.demo.feed import DAY_SECONDS, FeedStats, Record, paced_records, run_feed
from streamdp.engine import Engine, EngineSpec, parse_spec
from streamdp.engine.periods import PeriodClock, parse_instant
from streamdp.error_band import half_width95
from streamdp.metrics import StreamdpMetrics
from streamdp.noise import InsecureSeededSampler


@pytest.fixture(scope="module")
def spec() -> EngineSpec:
    text = resources.files("streamdp").joinpath("examples", "demo.toml").read_text("utf-8")
    return parse_spec(text, origin="demo.toml")


def _run_engine(spec: EngineSpec, source: str, scenario: str, days: int) -> list[dict[str, Any]]:
    """Output records (as published JSON) of the engine over ``days`` simulated days, on the
    demo's simulated clock (one day per second of feed time: each record arrives when due)."""
    engine = Engine(source_spec(spec, source), sampler=InsecureSeededSampler(11))
    out: list[dict[str, Any]] = []
    records = paced_records(scenario, spec, source, rate=60.0, pace=1.0, seed=3, bad_fraction=0.05)
    origin = min(PeriodClock(s.period).bounds(0)[0] for s in spec.streams.values())
    for offset, record in enumerate(records):
        if record.due >= days:
            break
        produced: list[Any] = engine.advance_clock(origin + record.due * 86400.0)
        result = engine.ingest(record.value, source_topic=record.topic, partition=0, offset=offset)
        produced += [*result.dead_letters, *result.outputs]
        out += [json.loads(r.to_json()) for r in produced]
    return out


def _interleave(records: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """Shuffle within windows of 12 records: what two partitions read in any order look like."""
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    for i in range(0, len(records), 12):
        window = records[i : i + 12]
        out += [window[j] for j in rng.permutation(len(window))]
    return out


LINE = re.compile(
    r"^release (\S+) epoch (\d+) period (\d+) \(([\d-]+)\) period count / running total ±95%: "
    r"(.*)$"
)


def test_plain_lines_print_every_period_once_with_the_records_values(spec: EngineSpec) -> None:
    records = _run_engine(spec, "restaurant-orders", "restaurant", days=40)
    releases = [r for r in records if r["kind"] == "release"]
    assert {r["epoch"] for r in releases} == {0, 1}, "40 days cross the 30-day horizon"
    board = Board(spec)
    printed: list[str] = []
    for i, record in enumerate(_interleave(records, seed=5)):
        board.add(record)
        if i % 7 == 0:
            printed += board.updates()
    printed += board.updates()

    by_key = {(r["epoch"], r["period"], r["counter"]): r for r in releases}
    seen = []
    for line in printed:
        match = LINE.match(line)
        if match is None or match[1] != "restaurant-items":
            continue
        epoch, period = int(match[2]), int(match[3])
        seen.append((epoch, period))
        values = re.findall(r"(\w+) (-?[\d,]+)±([\d,]+) / (-?[\d,]+)±([\d,]+)", match[5])
        assert [v[0] for v in values] == ["cola", "burger", "wings", "fries", "nuggets"]
        for counter, count, count_half, total, half in values:
            record = by_key[(epoch, period, counter)]
            assert int(count.replace(",", "")) == record["noisy_count"]
            assert int(count_half.replace(",", "")) == round(2.12 * record["count_std"] + 1)
            assert int(total.replace(",", "")) == record["noisy_total"]
            assert int(half.replace(",", "")) == round(2.12 * record["total_std"] + 1)
            assert record["period_start"].startswith(match[4])
    expected = sorted({(r["epoch"], r["period"]) for r in releases})
    # the newest period may still be incomplete in the last window; every other is printed once
    assert len(seen) == len(set(seen))
    assert sorted(seen)[: len(expected) - 1] == expected[:-1]


def _both_sources(spec: EngineSpec, days: int) -> tuple[Board, list[dict[str, Any]]]:
    records = _run_engine(spec, "restaurant-orders", "restaurant", days=days)
    records += _run_engine(spec, "hospital-admissions", "hospital", days=days)
    board = Board(spec)
    for record in records:
        board.add(record)
    metrics = StreamdpMetrics()
    metrics.bind_ledger(
        lambda: BudgetView(
            sources=(
                SourceBudget("restaurant-orders", 1.0, 1.0, 2.0),
                SourceBudget("hospital-admissions", 1.0, 1.0, 2.0),
            )
        )
    )
    board.set_budget(metrics.exposition().decode("utf-8"))
    return board, records


# the longest header the demo draws: insecure noise, a starting worker, five-digit values
HEADER = board_header(
    insecure=True,
    ready=False,
    elapsed=12345.0,
    day=1234,
    clock="2024-02-10 12:00",
    port=65535,
    feed_port=65535,
)


def _render(board: Board, width: int, height: int) -> list[str]:
    console = Console(width=width, height=height, record=True, file=io.StringIO())
    console.print(render_board(board, HEADER, height))
    return console.export_text().splitlines()


@pytest.mark.parametrize(("width", "height"), [(80, 24), (60, 16)])
def test_board_fits_the_terminal_without_wrapping(
    spec: EngineSpec, width: int, height: int
) -> None:
    board, _ = _both_sources(spec, days=40)
    lines = _render(board, width, height)
    assert len(lines) <= height
    assert max(cell_len(line) for line in lines) <= width
    # the header stays (at 80 columns whole, narrower cut, never wrapped onto a second line),
    # then the column titles
    for line, text in zip(lines, HEADER, strict=False):
        assert line == (text if len(text) <= width else text[: width - 1] + "…")
    assert lines[3].startswith("counter")
    # every stream keeps its title line; counters are what gets dropped
    titles = [line for line in lines if line.split(" ")[0] in board.streams]
    assert [t.split(" ")[0] for t in titles] == list(board.streams)
    text = "\n".join(lines)
    assert "Negative counts are noise: unbiased, so do not clip" in text
    if height >= 24:
        assert "epsilon spent / cap per epoch (event-level)" in text
        # every shown counter of the demo fits at 80x24, and the budget says both spends
        assert "nuggets" in text
        assert "age=18-44" in text
        assert "across epochs" in text
        # nothing that names or counts something is cut: the header (above), the counters,
        # the column titles and the budget rows; only stream titles and the dead-letter
        # reasons (most important first) may end in an ellipsis
        assert "hiv_positive_admissions " in text
        assert re.split(r"\s{2,}", lines[3]) == [
            "counter",
            "newest count",
            "newest total",
            "matched total",
            "consistent",
        ]
        for source in ("hospital-admissions", "restaurant-orders"):
            row = next(line for line in lines if line.startswith(source + " "))
            assert row.split() == [source, "1", "/", "1", "2"]
        cut = [line for line in lines if line.endswith("…")]
        assert all(
            line.split(" ")[0] in board.streams or line.startswith("dead letters (") for line in cut
        ), cut


def test_board_at_80x24_matches_the_unwrapped_rendering(spec: EngineSpec) -> None:
    """Nothing is lost to wrapping: a 200-column rendering of the same board has the same
    number of lines (rich would add lines if anything wrapped at 80)."""
    board, _ = _both_sources(spec, days=40)
    assert len(_render(board, 80, 24)) == len(_render(board, 200, 24))


def test_released_and_consistent_totals_are_of_the_same_period(spec: EngineSpec) -> None:
    board, records = _both_sources(spec, days=20)
    view = board.streams["restaurant-items"]
    latest, matched = view.latest, view.matched
    assert latest is not None
    assert matched is not None
    # the newest release is past the last revision: showing its total next to the consistent
    # one would compare different periods (the bug this test guards against)
    assert matched < latest
    releases = {
        (r["epoch"], r["period"], r["counter"]): r
        for r in records
        if r["kind"] == "release" and r["stream"] == "restaurant-items"
    }
    consistent = {
        (r["epoch"], r["period"]): r
        for r in records
        if r["kind"] == "consistent" and r["stream"] == "restaurant-items"
    }
    assert matched == max(consistent)
    lines = _render(board, 80, 24)
    title = next(line for line in lines if line.startswith("restaurant-items"))
    assert f"newest day {latest[1]}/30" in title
    assert f"matched day {matched[1]} " in title
    rows = {
        line.split()[0]: line for line in lines if line.split() and line.split()[0] in view.counters
    }
    assert set(rows) == set(view.counters)
    for counter in view.counters:
        cells = re.findall(r"-?[\d,]+(?:\.\d)?(?: ±[\d,]+)?", rows[counter].removeprefix(counter))
        newest, at_matched = releases[(*latest, counter)], releases[(*matched, counter)]
        assert cells[0] == f"{newest['noisy_count']:,} ±{half_width95(newest['count_std']):,.0f}"
        assert cells[1] == f"{newest['noisy_total']:,} ±{half_width95(newest['total_std']):,.0f}"
        assert cells[2] == (
            f"{at_matched['noisy_total']:,} ±{half_width95(at_matched['total_std']):,.0f}"
        )
        assert cells[3] == f"{consistent[matched]['totals'][counter]:,.1f}"
    # a stale record of an older revision arriving late does not move the matched period
    older = next(r for r in records if r["kind"] == "consistent" and r["stream"] == view.name)
    board.add(older)
    assert view.matched == matched


def test_dead_letters_are_counted_by_reason(spec: EngineSpec) -> None:
    source = "hospital-admissions"
    engine_records = _run_engine(spec, source, "hospital", days=12)
    board = Board(spec)
    for record in engine_records:
        board.add(record)
    letters = Counter(r["reason"] for r in engine_records if r["kind"] == "dead_letter")
    assert len(letters) >= 5
    assert board.dead_letters == letters
    line = board.dead_letter_line()
    assert line.startswith(
        f"dead letters ({sum(letters.values())}; a record two streams refuse counts twice): "
    )
    assert (
        Board(spec).dead_letter_line()
        == "dead letters (0; a record two streams refuse counts twice)"
    )
    for reason, n in letters.items():
        assert f"{reason} {n}" in line


def test_records_of_no_schema_are_not_shown_and_stop_nothing(spec: EngineSpec) -> None:
    """Anyone who can write to a release topic can put anything there: the board shows what the
    feed would show and skips the rest (review: a release without ``epoch`` raised KeyError
    out of the demo's reading task and ended the demo)."""
    _, records = _both_sources(spec, days=20)
    release = next(r for r in records if r["kind"] == "release")
    revision = next(r for r in records if r["kind"] == "consistent")
    hostile = [
        {k: v for k, v in release.items() if k != "epoch"},
        {**release, "noisy_count": "many"},
        {**release, "counter": None},
        {k: v for k, v in revision.items() if k != "totals"},
        {**revision, "revision": "x"},
        {"stream": release["stream"], "epoch": 0, "period": 1},  # no kind
        {"kind": "release", "stream": release["stream"]},
    ]
    clean, dirty = Board(spec), Board(spec)
    for record in records:
        clean.add(record)
    for record in [*hostile, *records, *hostile]:
        dirty.add(record)
    assert _render(dirty, 100, 40) == _render(clean, 100, 40)
    assert dirty.streams[release["stream"]].releases == clean.streams[release["stream"]].releases


def test_budget_comes_from_the_metrics_exposition(spec: EngineSpec) -> None:
    metrics = StreamdpMetrics()
    metrics.bind_ledger(lambda: BudgetView(sources=(SourceBudget("restaurant-orders", 1.0, 0.75),)))
    board = Board(spec)
    assert board.spent == {}
    board.set_budget(metrics.exposition().decode("utf-8"))
    assert board.spent == {"restaurant-orders": 0.75}
    assert board.caps["restaurant-orders"] == 1.0
    assert "restaurant-orders 0.75 / 1" in board.budget_line()


def test_half_width_covers_95_percent_of_one_laplace_node() -> None:
    # exact two-sided tail of a discrete Laplace variable with scale b (sd of the continuous
    # approximation sqrt(2) b; the discrete one is slightly smaller)
    for b in (0.5, 2.0, 7.0, 40.0, 1000.0):
        alpha = np.exp(-1.0 / b)
        sd = np.sqrt(2 * alpha) / (1 - alpha)  # exact sd of the discrete Laplace
        k = int(np.floor(half_width95(float(sd))))
        tail = 2 * alpha ** (k + 1) / (1 + alpha)  # P(|X| > k)
        assert tail <= 0.05
        # and not wastefully wide: at most one step, or 0.2%, past the exact 95% quantile
        exact = 0
        while 2 * alpha ** (exact + 1) / (1 + alpha) > 0.05:
            exact += 1
        assert k <= max(exact + 1, exact * 1.002), (b, k, exact)


def test_feed_is_keyed_by_source_and_paced_by_event_time(spec: EngineSpec) -> None:
    pace = 0.25
    records = []
    for record in paced_records(
        "restaurant", spec, "restaurant-orders", rate=50.0, pace=pace, seed=1, bad_fraction=0.1
    ):
        if record.due > 5 * pace:
            break
        records.append(record)
    assert {r.key for r in records} == {b"restaurant-orders"}
    assert {r.topic for r in records} == {"restaurant-orders"}
    dues = [r.due for r in records]
    assert dues == sorted(dues)
    origin = PeriodClock(spec.streams["restaurant-items"].period).bounds(0)[0]
    good = [r for r in records if not r.bad]
    for record in good:
        ts = parse_instant(json.loads(record.value)["event_time"])
        assert ts is not None
        assert record.due == pytest.approx((ts - origin) / DAY_SECONDS * pace)
    assert 0 < sum(r.bad for r in records) < len(good)


def test_run_feed_sends_in_order_and_stops_when_asked(spec: EngineSpec) -> None:
    sent: list[Record] = []
    stats = FeedStats()

    async def main() -> None:
        stop = asyncio.Event()

        async def send(record: Record) -> asyncio.Future[None]:
            sent.append(record)
            if len(sent) == 300:
                stop.set()
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done

        records = paced_records(
            "hospital", spec, "hospital-admissions", rate=100.0, pace=0.01, seed=2, bad_fraction=0
        )
        await asyncio.wait_for(run_feed(records, send, stats, pace=0.01, stop=stop), 30)

    asyncio.run(main())
    assert len(sent) == 300
    assert stats.sent == 300
    assert [r.due for r in sent] == sorted(r.due for r in sent)
