"""``streamdp feed``: the public page shows the released records exactly, and nothing else.

The replay tests run the real commands (``synth``, ``replay --insecure-seed``, ``feed``) as
subprocesses and read the feed over HTTP on 127.0.0.1. Protected files (dead letters, snapshot,
ledger) in the same directory carry a marker string that must never appear in any answer. The
browser test loads the page in Debian's chromium (headless) and checks the charts were drawn with
the data; its screenshot stays in the test's tmp dir. The broker test publishes releases to
``<ns>.releases`` and reads them back through the feed's JSON.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import math
import os
import re
import select
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamdp.error_band import half_width95
from streamdp.feed.model import FeedView
from streamdp.feed.records import parse_release
from streamdp.feed.sources import KafkaTopics, ReplayDirectory
from tests.page_probe import with_probe

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "schemas" / "examples"
#: Planted in every protected file next to the public ones: must never reach the feed.
SECRET = "PROTECTED-RAW-7f3a9c"
CHROMIUM_INSTALL = "apt-get install -y --no-install-recommends chromium"
STARTUP_SECONDS = 60.0


def _streamdp(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "streamdp", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"streamdp {args[0]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def replay_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real replay output (restaurant spec, 12 days), with the secret planted in every
    protected file and in a dead-letter-shaped line and an extra field on the release file."""
    work = tmp_path_factory.mktemp("feed-replay")
    events = work / "events.jsonl"
    said = _streamdp(
        "synth", "--scenario", "restaurant", "--periods", "12", "--rate", "20",
        "--output", str(events), "--bad-fraction", "0.05", cwd=work,
    )  # fmt: skip
    as_of = re.search(r"--as-of (\S+)", said)
    assert as_of is not None, f"synth did not print the releasing instant: {said}"
    out = work / "out"
    _streamdp(
        "replay", "--config", str(ROOT / "streamdp/examples/restaurant.toml"),
        "--input", str(events), "--output-dir", str(out), "--as-of", as_of.group(1),
        "--insecure-seed", "7", cwd=work,
    )  # fmt: skip
    for name in ("dead_letter.jsonl", "ledger.jsonl"):
        with (out / name).open("a") as handle:
            handle.write(json.dumps({"kind": "dead_letter", "raw": SECRET}) + "\n")
    (out / "snapshot.json").write_text(json.dumps({"raw_sums": SECRET}))
    first = _jsonl(out / "releases.jsonl")[0]
    with (out / "releases.jsonl").open("a") as handle:
        # a record of another kind, and a re-publication carrying a field no schema defines
        handle.write(json.dumps({"kind": "dead_letter", "stream": first["stream"], "raw": SECRET}))
        handle.write("\n" + json.dumps({**first, "raw_record": SECRET}) + "\n")
    return out


class Served:
    """A ``streamdp feed`` subprocess on a free loopback port."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "streamdp", "feed", *args, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], STARTUP_SECONDS)
        # the first line names the URL (EOF if it failed)
        line = self.process.stdout.readline() if ready else ""
        found = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
        if found is None:
            errors = self.stop()
            pytest.fail(f"streamdp feed did not start: {line!r}\n{errors}")
        self.url = found.group(1)
        self.announced = line.rstrip("\n")

    def get(self, name: str) -> str:
        with urllib.request.urlopen(self.url + name, timeout=10) as response:
            body: bytes = response.read()
        return body.decode("utf-8")

    def status(self, name: str) -> int:
        try:
            with urllib.request.urlopen(self.url + name, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            error.close()
            return int(error.code)

    def stop(self) -> str:
        self.process.terminate()
        try:
            _, errors = self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, errors = self.process.communicate()
        return errors


@pytest.fixture(scope="module")
def served(replay_dir: Path) -> Iterator[Served]:
    feed = Served("--from", str(replay_dir))
    yield feed
    feed.stop()


def test_the_console_line_gives_the_page_address_then_what_it_reads(
    served: Served, replay_dir: Path
) -> None:
    assert served.announced == (
        f"streamdp feed: page at {served.url}, reading replay output {replay_dir}"
    )
    topics = KafkaTopics("127.0.0.1:58475", "ns")
    assert topics.describe() == "Kafka topics ns.releases, ns.consistent on broker 127.0.0.1:58475"


def _latest_consistent(records: list[dict[str, Any]]) -> dict[tuple[str, int, int], Any]:
    latest: dict[tuple[str, int, int], dict[str, Any]] = {}
    for record in records:
        key = (record["stream"], record["epoch"], record["period"])
        if key not in latest or record["revision"] > latest[key]["revision"]:
            latest[key] = record
    return latest


def _release_records(replay_dir: Path) -> list[dict[str, Any]]:
    return [r for r in _jsonl(replay_dir / "releases.jsonl") if r.get("kind") == "release"]


def shown_values(stream: dict[str, Any]) -> dict[tuple[str, int, int], dict[str, Any]]:
    """A stream of ``feed.json`` as one dict per shown value, keyed (counter, epoch, period):
    the columns of each counter read at each of the stream's periods."""
    out = {}
    for counter in stream["counters"]:
        for i, (epoch, period, start, end) in enumerate(stream["periods"]):
            if counter["noisy_count"][i] is None:
                continue
            row = {name: column[i] for name, column in counter.items() if name != "counter"}
            out[counter["counter"], epoch, period] = {
                **row,
                "period_start": start,
                "period_end": end,
            }
    return out


def test_json_shows_every_release_exactly_with_its_band(replay_dir: Path, served: Served) -> None:
    document = json.loads(served.get("feed.json"))
    shown = {
        (s["stream"], *key): (s, row)
        for s in document["streams"]
        for key, row in shown_values(s).items()
    }
    releases = _release_records(replay_dir)
    assert len(shown) == len({r["key"] for r in releases}) > 0
    latest = _latest_consistent(_jsonl(replay_dir / "consistent.jsonl"))
    for record in releases:
        stream, row = shown[record["stream"], record["counter"], record["epoch"], record["period"]]
        for name in ("period_start", "period_end", "noisy_count", "noisy_total", "count_std",
                     "total_std"):  # fmt: skip
            assert row[name] == record[name], (name, record["key"])
        # the latest revision of the same period, beside it (null before any revision)
        revised = latest.get((record["stream"], record["epoch"], record["period"]))
        expected = None if revised is None else revised["totals"][record["counter"]]
        assert row["consistent_total"] == expected, record["key"]
        assert stream["mechanism"] == record["mechanism"]
        assert {"epoch": record["epoch"], "epsilon": record["epsilon"]} in stream[
            "epsilon_per_epoch"
        ]
        assert stream["noise_secure"] is False  # replay --insecure-seed: the page must say so
    for stream in document["streams"]:
        held = [v for k, v in latest.items() if k[0] == stream["stream"]]
        assert stream["revised_periods"] == len(held) > 0
        newest = max(held, key=lambda r: (r["epoch"], r["period"]))
        entry = stream["consistent_latest"]
        assert entry["revision"] == newest["revision"]
        assert entry["counts"] == newest["counts"]
        assert entry["totals"] == newest["totals"]
        assert entry["count_std"] == newest["count_std"]  # consistent values carry their sd
        assert entry["total_std"] == newest["total_std"]
        assert entry["total_half_width95"] == {
            name: half_width95(sd) for name, sd in newest["total_std"].items()
        }


def test_csv_downloads_match_the_records_exactly(replay_dir: Path, served: Served) -> None:
    rows = list(csv.DictReader(io.StringIO(served.get("releases.csv"))))
    by_key = {f"{r['stream']}|{r['counter']}|{r['epoch']}|{r['period']}": r for r in rows}
    releases = _release_records(replay_dir)
    assert len(rows) == len({r["key"] for r in releases})
    for record in releases:
        row = by_key[record["key"]]
        assert int(row["noisy_count"]) == record["noisy_count"]
        assert int(row["noisy_total"]) == record["noisy_total"]
        assert float(row["count_std"]) == record["count_std"]
        assert float(row["total_std"]) == record["total_std"]
        assert float(row["count_half_width95"]) == half_width95(record["count_std"])
        assert float(row["total_half_width95"]) == half_width95(record["total_std"])
        assert (row["period_start"], row["period_end"]) == (
            record["period_start"],
            record["period_end"],
        )
        # what a download must say about how the value was made (issue 26)
        assert row["mechanism"] == record["mechanism"]
        assert int(row["sensitivity"]) == record["sensitivity"]
        assert row["noise"] == record["noise"]
        assert row["noise_secure"] == str(record["noise_secure"])
        assert row["source"] == record["source"]  # streams of one source compose
        assert row["l2_sensitivity"] == ""  # pure DP: no L2 bound
    latest = _latest_consistent(_jsonl(replay_dir / "consistent.jsonl"))
    crow = list(csv.DictReader(io.StringIO(served.get("consistent.csv"))))
    assert len(crow) == sum(len(r["counts"]) for r in latest.values())
    for row in crow:
        record = latest[row["stream"], int(row["epoch"]), int(row["period"])]
        assert int(row["revision"]) == record["revision"]
        assert float(row["consistent_count"]) == record["counts"][row["counter"]]
        assert float(row["consistent_total"]) == record["totals"][row["counter"]]
        assert float(row["consistent_count_std"]) == record["count_std"][row["counter"]]
        assert float(row["consistent_total_std"]) == record["total_std"][row["counter"]]
        assert float(row["consistent_total_half_width95"]) == half_width95(
            record["total_std"][row["counter"]]
        )


def test_nothing_from_protected_files_reaches_any_answer(replay_dir: Path, served: Served) -> None:
    assert SECRET in (replay_dir / "dead_letter.jsonl").read_text()  # the plant is there
    for name in ("", "index.html", "feed.json", "releases.csv", "consistent.csv", "version.json"):
        body = served.get(name)
        assert SECRET not in body, name
        assert "dead_letter" not in body.replace("dead_letter.jsonl", ""), name
    for name in ("dead_letter.jsonl", "snapshot.json", "ledger.jsonl", "releases.jsonl",
                 "../dead_letter.jsonl", "%2e%2e/snapshot.json"):  # fmt: skip
        assert served.status(name) == 404, name
    assert json.loads(served.get("feed.json"))["streams"], "the page must still show releases"


def test_static_copy_equals_what_is_served(
    replay_dir: Path, served: Served, tmp_path: Path
) -> None:
    _streamdp(
        "feed", "--from", str(replay_dir), "--output-dir", str(tmp_path / "site"), cwd=tmp_path
    )
    for name in ("feed.json", "releases.csv", "consistent.csv"):
        assert (tmp_path / "site" / name).read_bytes().decode() == served.get(name), name
    page = (tmp_path / "site" / "index.html").read_text()
    assert SECRET not in page
    embedded = re.search(r'id="feed-data">(.*?)</script>', page, re.DOTALL)
    assert embedded is not None
    assert json.loads(embedded.group(1)) == json.loads(served.get("feed.json"))


def test_replay_directory_reads_appended_lines_once_and_waits_for_half_lines(
    tmp_path: Path,
) -> None:
    example = json.loads((EXAMPLES / "release.json").read_text())[0]
    second = {**example, "period": example["period"] + 1, "noisy_count": -3}
    path = tmp_path / "releases.jsonl"
    line = json.dumps(second)
    path.write_text(json.dumps(example) + "\n" + line[:20])
    directory, view = ReplayDirectory(tmp_path), FeedView()
    directory.read_new(view)
    assert len(view.releases) == 1
    assert view.ignored == 0  # the half-written line was not read as a bad record
    with path.open("a") as handle:
        handle.write(line[20:] + "\n")
    directory.read_new(view)
    directory.read_new(view)
    assert len(view.releases) == 2
    assert view.ignored == 0
    assert [row["noisy_count"] for row in view.release_rows()] == [example["noisy_count"], -3]


def test_only_schema_fields_of_release_records_are_taken() -> None:
    example = json.loads((EXAMPLES / "release.json").read_text())[0]
    assert parse_release({**example, "kind": "dead_letter"}) is None
    assert parse_release({**example, "noisy_count": "48"}) is None
    assert parse_release({k: v for k, v in example.items() if k != "count_std"}) is None
    release = parse_release({**example, "raw_record": SECRET})
    assert release is not None
    assert SECRET not in json.dumps(release.row())
    view = FeedView()
    view.add({**example, "raw_record": SECRET}, "release")
    view.add({"kind": "dead_letter", "raw": SECRET}, "release")
    assert view.ignored == 1
    assert SECRET not in json.dumps(view.document("test"))


def test_record_text_cannot_end_the_pages_data_script() -> None:
    """A spec's wording reaches the page through the records; "</script>" or "<!--" in it must
    stay data (escaped in the embedded JSON) and come back unchanged."""
    from streamdp.feed.page import render_page

    example = json.loads((EXAMPLES / "release.json").read_text())[0]
    hostile = "</script><script>alert(1)</script><!--"
    view = FeedView()
    view.add({**example, "title": hostile, "unit": "<b>u</b>"}, "release")
    page = render_page(view.document("test"))
    assert page.count("</script>") == 2  # the data element's and the program's, nothing else
    assert "<!--" not in page
    embedded = re.search(r'id="feed-data">(.*?)</script>', page, re.S)
    assert embedded is not None
    stream = json.loads(embedded.group(1))["streams"][0]
    assert (stream["title"], stream["unit"]) == (hostile, "<b>u</b>")


def _chromium() -> str:
    found = shutil.which("chromium")
    if found is not None:
        return found
    message = f"Debian's chromium is not installed: {CHROMIUM_INSTALL} (.ci/run installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(f"SKIPPED LOUDLY: {message}")


def _browse(chromium: str, profile: Path, *args: str) -> str:
    done = subprocess.run(
        [
            chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile}", "--window-size=1200,900",
            "--virtual-time-budget=5000", *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"chromium failed:\n{done.stderr[-2000:]}"
    return done.stdout


@pytest.mark.tool
def test_browser_draws_the_charts_with_the_data(
    replay_dir: Path, served: Served, tmp_path: Path
) -> None:
    chromium = _chromium()
    dom = _browse(chromium, tmp_path / "profile", "--dump-dom", served.url)
    document = json.loads(served.get("feed.json"))
    stream = document["streams"][0]
    first = stream["counters"][0]  # the counter the page selects first
    values = [row for (c, *_), row in shown_values(stream).items() if c == first["counter"]]
    periods = len(values)
    assert periods >= 12
    assert f'data-stream="{stream["stream"]}"' in dom
    # headed by the spec's wording (restaurant.toml's title, description and unit)
    assert "<h2>Items sold by the restaurant</h2>" in dom
    assert '<p class="description">Units of each menu item sold per day' in dom
    assert ": running total (items sold) (line)" in dom
    charts = re.findall(r'<svg [^>]*class="chart-(totals|counts)"[^>]*>', dom)
    assert sorted(charts) == ["counts", "totals"], charts
    assert dom.count(f'data-points="{periods}"') == 2  # both charts drew every period
    assert dom.count('class="point"') == periods
    assert dom.count('class="errbar"') == periods
    band = re.search(r'<path d="M([^"]+)" class="band"', dom)
    assert band is not None
    assert band.group(1).count(" L") == 2 * periods - 1  # upper and lower edge, every period
    assert re.search(r'<path d="M[^"]+" class="series-line"', dom)
    assert re.search(r'<path d="M[^"]+" class="consistent-line"', dom)
    latest = values[-1]
    total_cell = f"{latest['noisy_total']:,} ± {math.ceil(half_width95(latest['total_std'])):,}"
    assert total_cell in dom, total_cell
    # the insecure test sampler is flagged on the page (a rendered element, not the script)
    assert '<p class="warning">These releases used the INSECURE' in dom
    assert SECRET not in dom
    screenshot = tmp_path / "feed.png"
    _browse(chromium, tmp_path / "profile", f"--screenshot={screenshot}", served.url)
    assert screenshot.stat().st_size > 10_000, "an empty page screenshots to a few kB"


@pytest.mark.tool
def test_static_page_opens_from_disk_and_shows_the_newest_revised_period_apart(
    replay_dir: Path, tmp_path: Path
) -> None:
    """Revisions lag the releases: the latest period's consistent cells say "not yet revised"
    (never a value of another period beside it) and the newest revised period gets its own
    table, each value beside the release of that same period."""
    chromium = _chromium()
    public = tmp_path / "public"
    public.mkdir()
    shutil.copy(replay_dir / "releases.jsonl", public / "releases.jsonl")
    revisions = _jsonl(replay_dir / "consistent.jsonl")
    last_period = max(r["period"] for r in revisions)
    kept = [r for r in revisions if r["period"] < last_period - 1]
    (public / "consistent.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    site = tmp_path / "site"
    _streamdp("feed", "--from", str(public), "--output-dir", str(site), cwd=tmp_path)
    dom = _browse(chromium, tmp_path / "profile", "--dump-dom", (site / "index.html").as_uri())
    document = json.loads((site / "feed.json").read_text())
    stream = document["streams"][0]
    newest = stream["consistent_latest"]
    assert newest["period"] == last_period - 2
    assert 'class="consistent-latest"' in dom
    assert "<td>not yet revised</td>" in dom
    assert f"(epoch {newest['epoch']}, period {newest['period']}), revision" in dom
    counter = stream["counters"][0]["counter"]
    values = shown_values(stream)
    released = values[counter, newest["epoch"], newest["period"]]
    outward = math.ceil(half_width95(released["total_std"]))  # half-widths rounded up
    assert f"{released['noisy_total']:,} ± {outward:,}" in dom
    value, width = newest["totals"][counter], newest["total_half_width95"][counter]
    assert f"{value:,.1f} ± {math.ceil(width):,}".replace(".0 ±", " ±") in dom, (value, width)
    assert dom.count('class="point"') == sum(1 for c, *_ in values if c == counter), counter


@pytest.mark.tool
def test_served_page_polls_feed_json_and_redraws_with_new_releases(
    replay_dir: Path, tmp_path: Path
) -> None:
    """The page embeds the data it was rendered with, then polls ``version.json`` and fetches
    ``feed.json`` when it changed: a page rendered when fewer periods were released redraws with
    every period once the JSON has them."""
    chromium = _chromium()
    early = tmp_path / "early"
    early.mkdir()
    releases = _release_records(replay_dir)
    (early / "releases.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in releases if r["period"] <= 3)
    )
    site, full = tmp_path / "site", tmp_path / "full"
    _streamdp("feed", "--from", str(early), "--output-dir", str(site), cwd=tmp_path)
    _streamdp("feed", "--from", str(replay_dir), "--output-dir", str(full), cwd=tmp_path)
    for name in ("version.json", "feed.json"):  # what a poll answers from now on
        shutil.copy(full / name, site / name)
    periods = max(r["period"] for r in releases)
    assert 'data-points="3"' in _browse(
        chromium, tmp_path / "profile", "--dump-dom", (site / "index.html").as_uri()
    ), "opened from disk the page does not poll and shows its embedded 3 periods"
    port = _free_port()
    static = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=site,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}/index.html"

        def up() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    return int(response.status) == 200
            except OSError:
                return False

        _wait_for(up, STARTUP_SECONDS, "python -m http.server answers")
        dom = _browse(chromium, tmp_path / "profile", "--dump-dom", url)
    finally:
        static.terminate()
        static.wait(timeout=20)
    assert dom.count(f'data-points="{periods}"') == 2, "the poll did not redraw the charts"
    assert 'data-points="3"' not in dom


def _free_port() -> int:
    from streamdp.broker import free_loopback_port

    return free_loopback_port()


def _wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds:.0f} s: {what}")
        time.sleep(0.2)


async def _publish(bootstrap: str, records: list[tuple[str, dict[str, Any]]]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for topic, record in records:
            key = record.get("key", "x").encode()
            await producer.send_and_wait(topic, json.dumps(record).encode(), key=key)
    finally:
        await producer.stop()


def test_live_feed_follows_the_release_topics_only(
    broker: Any, unique_name: Callable[[str], str]
) -> None:
    namespace = unique_name("feed")
    broker.create_topics(
        {f"{namespace}.releases": 2, f"{namespace}.consistent": 1, f"{namespace}.dead-letter": 1}
    )
    example = json.loads((EXAMPLES / "release.json").read_text())[0]
    fair = json.loads((EXAMPLES / "consistent.json").read_text())[0]

    def release(period: int, count: int) -> dict[str, Any]:
        key = f"{example['stream']}|{example['counter']}|0|{period}"
        return {**example, "key": key, "period": period, "noisy_count": count}

    asyncio.run(
        _publish(
            broker.bootstrap,
            [(f"{namespace}.releases", release(p, 10 * p - 25)) for p in (1, 2, 3)]
            + [(f"{namespace}.consistent", fair)]
            + [(f"{namespace}.dead-letter", {"kind": "dead_letter", "raw": SECRET})],
        )
    )
    feed = Served("--bootstrap", broker.bootstrap, "--topic-namespace", namespace)
    try:

        def counts() -> list[int]:
            document = json.loads(feed.get("feed.json"))
            return [
                value
                for s in document["streams"]
                for c in s["counters"]
                for value in c["noisy_count"]
                if value is not None
            ]

        _wait_for(lambda: len(counts()) == 3, STARTUP_SECONDS, "the feed shows 3 releases")
        assert counts() == [-15, -5, 5]
        document = json.loads(feed.get("feed.json"))
        assert document["streams"][0]["consistent_latest"]["counts"] == fair["counts"]
        # following: a release published after the start appears too
        asyncio.run(_publish(broker.bootstrap, [(f"{namespace}.releases", release(4, 99))]))
        _wait_for(lambda: counts()[-1:] == [99], STARTUP_SECONDS, "the 4th release appears")
        for name in ("feed.json", "releases.csv", "index.html"):
            assert SECRET not in feed.get(name), name
    finally:
        errors = feed.stop()
    assert "Traceback" not in errors, errors


@pytest.mark.tool
@pytest.mark.slow
def test_demo_serves_the_feed_and_chromium_draws_it(tmp_path: Path) -> None:
    """``streamdp demo`` prints the feed's URL; the page served from the demo's own broker
    fills in live and renders its charts in chromium."""
    chromium = _chromium()
    demo = subprocess.Popen(
        [sys.executable, "-m", "streamdp", "demo", "--duration", "60", "--pace", "0.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )  # fmt: skip
    lines: list[str] = []
    assert demo.stdout is not None
    drain = threading.Thread(target=lambda: lines.extend(demo.stdout or ()), daemon=True)
    drain.start()
    try:

        def url() -> str | None:
            found = re.search(r"public feed page.*?(http://127\.0\.0\.1:\d+/)", "".join(lines))
            return None if found is None else found.group(1)

        _wait_for(lambda: url() is not None or demo.poll() is not None, 90, "the feed's URL")
        page = url()
        assert page is not None, "".join(lines)[-3000:]

        def released() -> int:
            try:
                with urllib.request.urlopen(page + "feed.json", timeout=5) as response:
                    document = json.loads(response.read())
            except OSError:
                return 0
            return sum(len(shown_values(s)) for s in document["streams"])

        _wait_for(lambda: released() >= 10, 60, "the demo's feed shows releases")
        dom = _browse(chromium, tmp_path / "profile", "--dump-dom", page)
        assert 'class="chart-totals"' in dom
        assert 'class="chart-counts"' in dom
        assert re.search(r'<path d="M[^"]+" class="band"', dom)
        assert dom.count('class="point"') >= 1
        assert '<p class="warning">' not in dom  # the demo's default noise is the secure sampler
        _browse(chromium, tmp_path / "profile", f"--screenshot={tmp_path / 'demo-feed.png'}", page)
    finally:
        demo.wait(timeout=120)
        drain.join(timeout=10)
        demo.stdout.close()
    assert demo.returncode == 0, "".join(lines)[-3000:]


def test_a_static_copy_of_topics_that_do_not_exist_is_refused_naming_those_that_do(
    broker: Any, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """Issue 26: a mistyped --topic-namespace wrote an empty site and exited 0."""
    namespace = unique_name("feed")
    broker.create_topics({f"{namespace}.releases": 1, f"{namespace}.consistent": 1})
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "streamdp", "feed", "--bootstrap", broker.bootstrap,
         "--topic-namespace", f"{namespace}x", "--output-dir", str(site)],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"topics {namespace}x.consistent and {namespace}x.releases do not exist" in done.stderr
    assert namespace in done.stderr.split("namespaces with a release topic there:")[1]
    assert "Traceback" not in done.stderr
    assert "Unclosed" not in done.stderr
    assert not site.exists()


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--topic-namespace", "other"], "--topic-namespace names the Kafka topics"),
        (["--output-dir", "site", "--port", "8000"], "--port is where the page is served"),
    ],
)
def test_flags_that_would_be_ignored_are_refused(
    flags: list[str], words: str, replay_dir: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streamdp", "feed", "--from", str(replay_dir), *flags],
        check=False, capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith(f"streamdp feed: error: {words}")
    assert not (tmp_path / "site").exists()


#: Appended to a static copy of the page: measures what a reader at this width would see and
#: leaves it on the body of the frame around it (chromium's --dump-dom prints that document).
_MEASURE = """<script>
const texts = [...document.querySelectorAll("svg text")];
const heights = texts.map(t => t.getBoundingClientRect().height).filter(h => h > 0);
const tables = [...document.querySelectorAll("table")];
// a chart's text drawn beyond its chart's box is cut off; two texts of a chart that cross
// are unreadable
const inside = (r, box) => r.left >= box.left - 0.5 && r.right <= box.right + 0.5
  && r.top >= box.top - 0.5 && r.bottom <= box.bottom + 0.5;
const cross = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom
  && b.top < a.bottom;
const clipped = [], crossing = [];
for (const svg of document.querySelectorAll("svg")) {
  const box = svg.getBoundingClientRect();
  const own = [...svg.querySelectorAll("text")].map(t => [t, t.getBoundingClientRect()])
    .filter(([, r]) => r.width > 0);
  for (const [t, r] of own) if (!inside(r, box)) clipped.push(t.textContent);
  own.forEach(([t, r], i) => own.slice(i + 1).forEach(([u, q]) => {
    if (cross(r, q)) crossing.push(`${t.textContent} / ${u.textContent}`);
  }));
}
parent.document.body.dataset.measure = JSON.stringify({
  viewport: window.innerWidth,
  page: document.documentElement.scrollWidth,
  smallest_text: Math.min(...heights),
  texts: heights.length,
  tables_outside_wrap: tables.filter(t => !t.closest(".table-wrap")).length,
  clipped_texts: clipped,
  crossing_texts: crossing,
  status: document.getElementById("status").textContent,
  source: document.getElementById("source").textContent,
});
</script>"""


def _replayed_site(work: Path, scenario: str, periods: str, rate: str) -> Path:
    """A static site of a replay of ``scenario``'s example spec, made with the commands a user
    runs: synth, replay at the instant synth printed, feed --output-dir."""
    events = work / "events.jsonl"
    said = _streamdp(
        "synth", "--scenario", scenario, "--periods", periods, "--rate", rate,
        "--output", str(events), cwd=work,
    )  # fmt: skip
    as_of = re.search(r"--as-of (\S+)", said)
    assert as_of is not None
    _streamdp(
        "replay", "--config", str(ROOT / f"streamdp/examples/{scenario}.toml"),
        "--input", str(events), "--output-dir", str(work / "out"), "--as-of", as_of.group(1),
        cwd=work,
    )  # fmt: skip
    _streamdp("feed", "--from", str(work / "out"), "--output-dir", str(work / "site"), cwd=work)
    return work / "site"


@pytest.fixture(scope="module")
def hospital_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The hospital spec (a census stream of 45 counters over 40 days, a monthly flag)."""
    return _replayed_site(tmp_path_factory.mktemp("feed-hospital"), "hospital", "40", "30")


@pytest.fixture(scope="module")
def census_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ten years of the census spec: 355 counters x 120 months."""
    return _replayed_site(tmp_path_factory.mktemp("feed-census"), "census", "120", "300")


@pytest.mark.slow
def test_a_ten_year_census_site_is_under_5_mb_for_its_first_view(census_site: Path) -> None:
    """Issue 26: the 120-month census page was 86.7 MB (every value an object of named fields,
    every revision's full maps). The first view is the page with its data: under 5 MB."""
    page = (census_site / "index.html").stat().st_size
    assert page < 5_000_000, page
    document = json.loads((census_site / "feed.json").read_text())
    (stream,) = document["streams"]
    assert len(stream["periods"]) == 120
    assert len(stream["counters"]) == 355
    assert all(len(c["noisy_total"]) == 120 for c in stream["counters"])


@pytest.mark.tool
@pytest.mark.parametrize("width", [400, 1400])
@pytest.mark.parametrize("example", ["restaurant", "hospital", "census"])
def test_the_page_fits_a_phone_and_a_desktop(
    example: str,
    width: int,
    replay_dir: Path,
    hospital_site: Path,
    census_site: Path,
    tmp_path: Path,
) -> None:
    """Issue 26: at 500 px the table overflowed (704 px) and chart text was about 4 px. The
    page must not scroll sideways (wide tables scroll inside their own box), and chart text
    must stay readable, at phone and desktop widths."""
    chromium = _chromium()
    if example == "restaurant":
        site = tmp_path / "site"
        _streamdp("feed", "--from", str(replay_dir), "--output-dir", str(site), cwd=tmp_path)
    else:
        site = hospital_site if example == "hospital" else census_site
    page = tmp_path / "measured.html"
    page.write_text(with_probe((site / "index.html").read_text(), _MEASURE))
    # headless chromium's window is at least 500 px wide: the page is shown in a frame of the
    # width under test (a phone's 400 px), as a browser of that width would show it
    frame = tmp_path / "frame.html"
    frame.write_text(
        '<html><body style="margin:0"><iframe src="measured.html" '
        f'style="width:{width}px;height:900px;border:0"></iframe></body></html>'
    )
    outer = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--allow-file-access-from-files", f"--user-data-dir={tmp_path / 'profile'}",
         f"--window-size={max(width, 500) + 20},900", "--virtual-time-budget=5000",
         "--dump-dom", frame.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={max(width, 500)},900",
         "--virtual-time-budget=5000", "--dump-dom", (site / "index.html").as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    found = re.search(r'data-measure="([^"]+)"', outer)
    assert found is not None, outer[:2000]
    measure = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert measure["viewport"] == width
    assert measure["page"] <= width, measure  # nothing makes the page scroll sideways
    assert measure["tables_outside_wrap"] == 0, measure
    assert measure["texts"] > 0
    assert measure["smallest_text"] >= 9.0, measure  # px on screen, at every width
    assert measure["clipped_texts"] == [], measure  # chart titles wrap instead
    assert measure["crossing_texts"] == [], measure
    # no address, port or server path on a public page; the data's own date, not the reader's
    assert "127.0.0.1" not in dom
    assert str(tmp_path) not in dom
    assert str(site) not in dom
    assert measure["status"].startswith("Data as of the end of ")
    assert measure["source"].startswith("a file replay")
    document = json.loads((site / "feed.json").read_text())
    if example != "restaurant":
        # census-style: the total, a small table per attribute, the cells folded away
        assert dom.count('<div class="marginal">') == 3
        assert dom.count('<details class="cells">') == 1
    if example == "hospital":
        census = next(s for s in document["streams"] if s["stream"] == "admissions-census")
        names = [c["counter"] for c in census["counters"]]
        assert names[0] == "total"  # as declared: total, then marginals, then cells
        assert names.index("age=0-17") < names.index("age=18-44") < names.index("age=65+")
        monthly = next(s for s in document["streams"] if s["stream"] == "hiv-admissions")
        assert monthly["latest_period"] is not None
        assert "Jan 2024" in dom or "Feb 2024" in dom  # months in words


@pytest.mark.tool
def test_a_zcdp_stream_shows_rho_and_its_epsilon_delta_bound(tmp_path: Path) -> None:
    """A census stream under zCDP (census_zcdp.toml): the page states rho per epoch with the
    (epsilon, delta) it implies, the JSON carries rho per epoch, and releases.csv its rho and
    delta (empty for pure-DP rows)."""
    events = tmp_path / "events.jsonl"
    said = _streamdp(
        "synth", "--scenario", "census", "--periods", "3", "--rate", "10",
        "--output", str(events), cwd=tmp_path,
    )  # fmt: skip
    as_of = re.search(r"--as-of (\S+)", said)
    assert as_of is not None
    out = tmp_path / "out"
    _streamdp(
        "replay", "--config", str(ROOT / "streamdp/examples/census_zcdp.toml"),
        "--input", str(events), "--output-dir", str(out), "--as-of", as_of.group(1),
        "--insecure-seed", "3", cwd=tmp_path,
    )  # fmt: skip
    site = tmp_path / "site"
    _streamdp("feed", "--from", str(out), "--output-dir", str(site), cwd=tmp_path)
    stream = json.loads((site / "feed.json").read_text())["streams"][0]
    assert stream["rho_per_epoch"] == [{"epoch": 0, "rho": 0.5, "delta": 1e-10}]
    assert stream["rho_sum_over_epochs"] == 0.5
    assert stream["rho_sum_over_epochs_epsilon"] == pytest.approx(7.2861, abs=1e-4)
    # epochs' (epsilon, delta) bounds do not add at one delta: no summed epsilon (an audit)
    assert stream["epsilon_sum_over_epochs"] is None
    rows = list(csv.DictReader(io.StringIO((site / "releases.csv").read_text())))
    assert {(r["rho"], r["privacy_delta"], r["noise"]) for r in rows} == {
        ("0.5", "1e-10", "insecure-seeded-numpy-gaussian")
    }
    # the L2 bound the Gaussian noise is calibrated on, beside the L1 one (audit F5)
    (record,) = {json.dumps({k: r[k] for k in ("sensitivity", "l2_sensitivity")}) for r in
                 _release_records(out)}  # fmt: skip
    bounds = json.loads(record)
    assert bounds["l2_sensitivity"] == math.sqrt(bounds["sensitivity"])  # census: k + 2 cells
    assert stream["l2_sensitivity"] == bounds["l2_sensitivity"]
    assert {float(r["l2_sensitivity"]) for r in rows} == {bounds["l2_sensitivity"]}
    dom = _browse(_chromium(), tmp_path / "profile", "--dump-dom", (site / "index.html").as_uri())
    assert "<h2>Census-style person counts (zCDP)</h2>" in dom
    # a calibration constant, not a loss: shown at its nearest, sqrt 5 as 2.2361 (a feed audit
    # read 2.24, rounded up, as another bound)
    l2_shown = f"{bounds['l2_sensitivity']:.4f}"
    assert l2_shown == "2.2361"
    assert f"sensitivity L1 {bounds['sensitivity']}, L2 {l2_shown} per event" in dom
    # the (epsilon, delta) bound rounded up, never down (7.2861... is shown as 7.287)
    shown = f"{math.ceil(stream['rho_sum_over_epochs_epsilon'] * 1000) / 1000}"
    assert shown == "7.287"
    assert f"zero-concentrated DP): epoch 0: ρ = 0.5, that is (ε, δ) = ({shown}, 1e-10)" in dom
    # summed over epochs: rho, and what it is as (epsilon, delta)
    assert (
        "Summed over its epochs (one event in each epoch): "
        f"ρ = 0.5, that is (ε, δ) = ({shown}, 1e-10)." in dom
    )
