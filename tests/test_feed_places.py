"""The feed's tree view of a places stream (issue 29: "the feed shows a tree: pick a place, see
its series and its children").

- releases of a places stream say where each counter sits (``place``: node, parent, label,
  level; ``cell``), exactly as the spec's places file, and validate against the schema;
- ``feed.json`` carries the tree, the latest period and the newest consistent period of every
  counter aligned with it, and only the root's series; each place's series (served as
  ``series/<stream>/<place>.json`` and written beside a static page) equals its releases;
- in a browser (the full county example, 3,194 places): a link opens a county with its charts
  and the path above it; clicking a state descends to its counties; the children's consistent
  totals shown add up to the place's; the page fits a phone.
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from streamdp.engine.replay import read_jsonl, replay
from streamdp.feed.model import FeedView
from streamdp.feed.server import render_series, write_static
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import generate, release_instant
from tests.page_probe import with_probe
from tests.places_fixture import merged_parts, small_county_spec
from tests.test_feed import ROOT, Served, _browse, _chromium, _streamdp

STREAM = "admissions-by-county"


@pytest.fixture(scope="module")
def small_replay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 days of the county example over 4 states and 14 counties (19 places x 2 sexes),
    revised every 2 days, with seeded noise."""
    work = tmp_path_factory.mktemp("places-feed")
    spec = small_county_spec()
    lines = [line.text for line in generate("county-admissions", 12, 40.0, seed=6, spec=spec)]
    events = work / "events.jsonl"
    events.write_text("".join(text + "\n" for text in lines), encoding="utf-8")
    replay(
        spec,
        events,
        work / "out",
        as_of=release_instant(spec, 12),
        sampler=InsecureSeededSampler(4),
    )
    return work / "out"


def _view(out: Path) -> FeedView:
    view = FeedView()
    for record in read_jsonl(out / "releases.jsonl"):
        view.add(record, "release")
    for record in read_jsonl(out / "consistent.jsonl"):
        view.add(record, "consistent")
    return view


def test_places_releases_say_where_each_counter_sits(small_replay: Path) -> None:
    spec = small_county_spec().streams[STREAM]
    places = spec.counters.places
    assert places is not None
    schema = json.loads((ROOT / "schemas/release.schema.json").read_text())
    parent = places.tree.parent.tolist()
    releases = [r for r in read_jsonl(small_replay / "releases.jsonl") if r["kind"] == "release"]
    assert releases
    for record in releases:
        jsonschema.validate(record, schema)
        node, cell = record["counter"].split("/")
        i = places.ids.index(node)
        assert record["place"] == {
            "node": node,
            "parent": None if parent[i] < 0 else places.ids[parent[i]],
            "label": places.labels[i],
            "level": int(places.depth[i]),
        }
        assert record["cell"] == cell
    # the schema refuses a malformed place (it would otherwise reach readers unchecked)
    broken = {**releases[0], "place": {**releases[0]["place"], "level": -1}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_feed_json_carries_the_tree_and_every_places_latest_values(small_replay: Path) -> None:
    view = _view(small_replay)
    (stream,) = view.document("test")["streams"]
    spec = small_county_spec().streams[STREAM]
    places = spec.counters.places
    assert places is not None
    tree = stream["places"]
    parent = places.tree.parent.tolist()
    assert tree["nodes"] == [
        [node, None if parent[i] < 0 else parent[i], places.labels[i], int(places.depth[i])]
        for i, node in enumerate(places.ids)
    ]
    assert tree["cells"] == ["sex=female", "sex=male"]
    names = spec.counters.names  # place major, cells inner: aligned with the columns
    releases = [r for r in read_jsonl(small_replay / "releases.jsonl") if r["kind"] == "release"]
    latest = {r["counter"]: r for r in releases if (r["epoch"], r["period"]) == (0, 12)}
    assert tree["latest"]["noisy_count"] == [latest[n]["noisy_count"] for n in names]
    assert tree["latest"]["total_std"] == [latest[n]["total_std"] for n in names]
    newest = merged_parts(read_jsonl(small_replay / "consistent.jsonl"))[-1]
    assert (tree["consistent"]["epoch"], tree["consistent"]["period"]) == (0, 12)
    assert tree["consistent"]["total"] == [newest["totals"][n] for n in names]
    assert tree["consistent"]["count_std"] == [newest["count_std"][n] for n in names]
    # only the root's series is embedded; the full revision is in ``places``, not repeated
    assert [c["counter"] for c in stream["counters"]] == ["US/sex=female", "US/sex=male"]
    assert stream["consistent_latest"] is None


def test_each_places_series_equals_its_releases(small_replay: Path, tmp_path: Path) -> None:
    view = _view(small_replay)
    releases = [r for r in read_jsonl(small_replay / "releases.jsonl") if r["kind"] == "release"]
    by_key = {(r["counter"], r["epoch"], r["period"]): r for r in releases}
    revised: dict[tuple[str, int, int], float] = {}
    for record in merged_parts(read_jsonl(small_replay / "consistent.jsonl")):
        for name, total in record["totals"].items():
            revised[name, record["epoch"], record["period"]] = total  # later revisions win
    places = small_county_spec().streams[STREAM].counters.places
    assert places is not None
    written = write_static(view, "test", tmp_path / "site")
    assert len([p for p in written if p.parent.name == STREAM]) == places.size
    for i, node in enumerate(places.ids):
        series = view.series(STREAM, i)
        assert series is not None
        assert series["place"] == node
        assert [c["counter"] for c in series["counters"]] == [
            f"{node}/sex=female",
            f"{node}/sex=male",
        ]
        for counter in series["counters"]:
            for (epoch, period, _, _), count, total, fair in zip(
                series["periods"],
                counter["noisy_count"],
                counter["noisy_total"],
                counter["consistent_total"],
                strict=True,
            ):
                release = by_key[counter["counter"], epoch, period]
                assert (count, total) == (release["noisy_count"], release["noisy_total"])
                assert fair == revised.get((counter["counter"], epoch, period))
        on_disk = json.loads((tmp_path / "site" / "series" / STREAM / f"{i}.json").read_text())
        assert on_disk == series
    assert view.series(STREAM, places.size) is None
    assert view.series("no-such-stream", 0) is None
    assert render_series(view, f"series/{STREAM}/../feed.json") is None
    assert render_series(view, f"series/{STREAM}/01.json") is None


def test_the_feed_serves_each_places_series_and_nothing_else(small_replay: Path) -> None:
    served = Served("--from", str(small_replay))
    try:
        view = _view(small_replay)
        assert json.loads(served.get(f"series/{STREAM}/5.json")) == view.series(STREAM, 5)
        assert served.status(f"series/{STREAM}/19.json") == 404  # 19 places: 0..18
        assert served.status("series/other/0.json") == 404
        assert served.status(f"series/{STREAM}/x.json") == 404
        assert served.status(f"series/{STREAM}/../../events.jsonl") == 404
    finally:
        served.stop()


# --- the page, on the full county example (3,194 places x 2 sexes) -------------------------


@pytest.fixture(scope="module")
def county_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five days of the county example, made with the commands a user runs (synth, replay at
    the instant synth printed, feed --output-dir)."""
    work = tmp_path_factory.mktemp("county-site")
    events = work / "events.jsonl"
    said = _streamdp(
        "synth", "--scenario", "county-admissions", "--periods", "8", "--rate", "400",
        "--output", str(events), cwd=work,
    )  # fmt: skip
    as_of = re.search(r"--as-of (\S+)", said)
    assert as_of is not None
    _streamdp(
        "replay", "--config", str(ROOT / "streamdp/examples/county_admissions.toml"),
        "--input", str(events), "--output-dir", str(work / "out"), "--as-of", as_of.group(1),
        "--insecure-seed", "2", cwd=work,
    )  # fmt: skip
    _streamdp("feed", "--from", str(work / "out"), "--output-dir", str(work / "site"), cwd=work)
    return work / "site"


@pytest.fixture(scope="module")
def county_web(county_site: Path) -> Iterator[str]:
    """The static site served by a plain web server on loopback (as a user would publish it)."""
    handler = functools.partial(_QuietHandler, directory=str(county_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _text(dom: str, pattern: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", m) for m in re.findall(pattern, dom, flags=re.S)]


@pytest.mark.tool
def test_a_link_opens_a_county_with_its_series_and_the_path_above_it(
    county_web: str, county_site: Path, tmp_path: Path
) -> None:
    document = json.loads((county_site / "feed.json").read_text())
    (stream,) = document["streams"]
    nodes = stream["places"]["nodes"]
    county = next(i for i, n in enumerate(nodes) if n[3] == 2 and n[0].startswith("S07-"))
    state = nodes[county][1]
    dom = _browse(
        _chromium(),
        tmp_path / "profile",
        "--dump-dom",
        f"{county_web}#place={STREAM}/{nodes[county][0]}",
    )
    crumbs = _text(dom, r'<p class="breadcrumb"[^>]*>(.*?)</p>')
    assert crumbs == [f"Place: Nation › {nodes[state][2]} › {nodes[county][2]}"]
    # the county's charts, from its own series file: one point per released period
    points = re.findall(r'aria-label="([^"]+)" data-points="(\d+)"', dom)
    assert [(label.split(":")[0], int(n)) for label, n in points] == [
        (f"{nodes[county][2]} (sex=female)", len(stream["periods"]))
    ] * 2
    # a county has no places below it
    assert "This place has no places below it." in dom


@pytest.mark.tool
def test_clicking_a_state_shows_its_counties_adding_up(
    county_web: str, county_site: Path, tmp_path: Path
) -> None:
    document = json.loads((county_site / "feed.json").read_text())
    (stream,) = document["streams"]
    nodes = stream["places"]["nodes"]
    state = next(i for i, n in enumerate(nodes) if n[0] == "S12")
    counties = [i for i, n in enumerate(nodes) if n[1] == state]
    # a copy of the page that clicks the state in the nation's table, then the male cell
    clicking = """<script>
setTimeout(() => {
  document.querySelector('tr.child button[data-place="S12"]').click();
  setTimeout(() => {
    const cell = document.querySelector('select[aria-label="cell"]');
    cell.value = "1"; cell.dispatchEvent(new Event("change"));
    setTimeout(() => { document.body.dataset.done = location.hash; }, 1500);
  }, 1500);
}, 500);
</script>"""
    page = with_probe((county_site / "index.html").read_text(), clicking)
    (county_site / "clicked.html").write_text(page)
    dom = _browse(_chromium(), tmp_path / "profile", "--dump-dom", county_web + "clicked.html")
    assert f'data-done="#place={STREAM}/S12"' in dom
    rows = re.findall(r'<tr data-place="([^"]+)" class="(chosen|child)">(.*?)</tr>', dom, re.S)
    assert [place for place, _, _ in rows] == ["S12"] + [nodes[i][0] for i in counties]
    # the values shown are the male cell's, and the children's consistent totals add up
    width = 2
    fair = stream["places"]["consistent"]
    total = sum(fair["total"][i * width + 1] for i in counties)
    summed = _text(dom, r'<p class="facts tree-sum">(.*?)</p>')
    assert len(summed) == 1
    shown = re.findall(r"add up to (-?[\d,.]+); its own is (-?[\d,.]+)", summed[0])
    assert shown, summed
    expected = f"{total:,.1f}".removesuffix(".0")  # the page's en-US, at most one decimal
    assert shown[0][0] == shown[0][1] == expected
    assert "(sex=male)" in dom


@pytest.mark.tool
@pytest.mark.parametrize("width", [400, 1400])
def test_the_places_page_fits_a_phone_and_a_desktop(
    county_site: Path, width: int, tmp_path: Path
) -> None:
    from tests.test_feed import _MEASURE

    page = tmp_path / "measured.html"
    page.write_text(with_probe((county_site / "index.html").read_text(), _MEASURE))
    frame = tmp_path / "frame.html"
    frame.write_text(
        '<html><body style="margin:0"><iframe src="measured.html" '
        f'style="width:{width}px;height:900px;border:0"></iframe></body></html>'
    )
    outer = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--allow-file-access-from-files", f"--user-data-dir={tmp_path / 'profile'}",
         f"--window-size={max(width, 500) + 20},900", "--virtual-time-budget=5000",
         "--dump-dom", frame.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    found = re.search(r'data-measure="([^"]+)"', outer)
    assert found is not None, outer[:2000]
    measure = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert measure["page"] <= width, measure
    assert measure["tables_outside_wrap"] == 0, measure
    assert measure["smallest_text"] >= 9.0, measure
    assert measure["texts"] > 0, measure  # a place's charts are drawn in the first view
    assert measure["clipped_texts"] == [], measure
    assert measure["crossing_texts"] == [], measure
    # the first view stays small at 6,388 counters: the tree and two periods' columns
    assert (county_site / "index.html").stat().st_size < 3_000_000


@pytest.mark.tool
def test_published_non_negative_integers_are_shown_labelled_beside_the_unbiased_values(
    tmp_path: Path,
) -> None:
    """A stream publishing non-negative integer estimates (consistency.nonnegative_integers):
    the feed keeps them (consistent.csv, feed.json) and the page shows them in their own
    labelled column next to the consistent totals."""
    from dataclasses import replace

    from streamdp.engine.spec import ConsistencySpec
    from streamdp.feed.model import CONSISTENT_COLUMNS, to_csv

    base = small_county_spec()
    stream = replace(
        base.streams[STREAM],
        consistency=ConsistencySpec(every_periods=2, nonnegative_integers=True),
    )
    spec = replace(base, streams={STREAM: stream})
    lines = [line.text for line in generate("county-admissions", 6, 40.0, seed=8, spec=spec)]
    events = tmp_path / "events.jsonl"
    events.write_text("".join(text + "\n" for text in lines), encoding="utf-8")
    replay(spec, events, tmp_path / "out", as_of=release_instant(spec, 6),
           sampler=InsecureSeededSampler(2))  # fmt: skip
    view = _view(tmp_path / "out")
    newest = merged_parts(read_jsonl(tmp_path / "out" / "consistent.jsonl"))[-1]
    integers = newest["nonnegative_totals"]
    (shown,) = view.document("test")["streams"]
    names = spec.streams[STREAM].counters.names
    assert shown["places"]["consistent"]["nonnegative_total"] == [integers[n] for n in names]
    rows = [r for r in view.consistent_rows() if r["period"] == newest["period"]]
    assert {r["counter"]: r["nonnegative_total"] for r in rows} == integers
    assert {r["counter"]: r["nonnegative_count"] for r in rows} == newest["nonnegative_counts"]
    assert (
        to_csv(rows, CONSISTENT_COLUMNS)
        .splitlines()[0]
        .endswith("nonnegative_count,nonnegative_total")
    )
    write_static(view, "test", tmp_path / "site")
    dom = _browse(_chromium(), tmp_path / "profile", "--dump-dom",
                  (tmp_path / "site" / "index.html").as_uri())  # fmt: skip
    assert "non-negative integer total*" in dom
    cells = re.findall(r'<tr data-place="([^"]+)" class="(?:chosen|child)">.*?'
                       r'<td class="integer">([^<]*)</td>', dom, re.S)  # fmt: skip
    places = spec.streams[STREAM].counters.places
    assert places is not None
    expected = {places.ids[i]: integers[names[2 * i]] for i in range(5)}  # nation + 4 states
    assert {place: int(text.replace(",", "")) for place, text in cells} == expected
    assert "biased" in dom


@pytest.mark.parametrize("name", ["../../escaped", "<absolute>", "a/b", "..", ""])
def test_a_stream_named_like_a_path_is_not_shown_nor_written_outside_the_site(
    small_replay: Path, tmp_path: Path, name: str
) -> None:
    """The static site names a folder after each places stream: a record whose ``stream`` is
    a path (anyone who can write to a release topic) must not reach the file system (security
    audit of 2026-11-28: it wrote series files outside ``--output-dir``)."""
    if name == "<absolute>":
        name = str(tmp_path / "escaped")
    view = FeedView()
    shown = 0
    for kind, file in (("release", "releases.jsonl"), ("consistent", "consistent.jsonl")):
        for record in read_jsonl(small_replay / file):
            if record["kind"] != kind:
                continue
            view.add({**record, "stream": name}, kind)
            shown += 1
    assert shown  # the records themselves are well formed: only the name is refused
    assert view.places_streams() == {}
    site = tmp_path / "a" / "site"
    written = write_static(view, "test", site)
    assert written
    assert all(site in path.parents for path in written)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()) == sorted(
        p.relative_to(tmp_path) for p in written
    )
    # the same records under their own name are shown: the refusal is the name's
    good = _view(small_replay)
    assert STREAM in good.places_streams()


@pytest.mark.tool
def test_a_places_stream_without_the_tree_constraint_claims_no_sum(tmp_path: Path) -> None:
    """An audit found the page saying "every place is the sum of the places below it" for a
    places stream whose revisions have no constraint (``constraints = { kind = "none" }``),
    next to "(constraint: none)": the sum line is only for revisions on the tree."""
    from dataclasses import replace

    from streamdp.engine.spec import ConstraintSpec

    base = small_county_spec()
    stream = replace(base.streams[STREAM], constraints=ConstraintSpec(kind="none"))
    spec = replace(base, streams={STREAM: stream})
    lines = [line.text for line in generate("county-admissions", 4, 40.0, seed=8, spec=spec)]
    events = tmp_path / "events.jsonl"
    events.write_text("".join(text + "\n" for text in lines), encoding="utf-8")
    replay(spec, events, tmp_path / "out", as_of=release_instant(spec, 4),
           sampler=InsecureSeededSampler(2))  # fmt: skip
    (newest,) = merged_parts(read_jsonl(tmp_path / "out" / "consistent.jsonl"))[-1:]
    assert newest["constraint"] == "none"
    write_static(_view(tmp_path / "out"), "test", tmp_path / "site")
    dom = _browse(_chromium(), tmp_path / "profile", "--dump-dom",
                  (tmp_path / "site" / "index.html").as_uri())  # fmt: skip
    assert "(constraint: none)" in dom  # the page drew the revision ...
    assert not _text(dom, r'<p class="facts tree-sum">(.*?)</p>')  # ... and claimed no sum
    drawn = re.sub(r"<script.*?</script>", "", dom, flags=re.S)  # the page, not its code
    assert "every place is the sum" not in drawn
