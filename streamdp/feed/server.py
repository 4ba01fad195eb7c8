"""Serving the feed on loopback, and writing it as static files.

The server answers GET for exactly the names in :data:`FILES` (the page, ``feed.json``,
``releases.csv``, ``consistent.csv``, ``version.json``) and, for a places stream, each place's
series (``series/<stream>/<place index>.json``, :data:`SERIES_PATH`), all rendered from the
:class:`FeedView`; it never serves files from disk, so nothing in a replay directory other than
its two public files can be reached through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable
from pathlib import Path

from streamdp.errors import ConfigError
from streamdp.feed.model import FeedView
from streamdp.feed.page import content_security_policy, render_page
from streamdp.feed.tables import CONSISTENT_COLUMNS, RELEASE_COLUMNS, to_csv

LOOPBACK = "127.0.0.1"
_MAX_REQUEST_BYTES = 16_384
#: The longest a client may take to send its request's headers, seconds; then the connection
#: is closed (a client that sends a header line now and then held a connection for ever:
#: security audit of 2026-11-28).
REQUEST_TIMEOUT_SECONDS = 10.0
#: The longest an answer may take to be taken by its client, seconds (a page of a few MB
#: crosses loopback in milliseconds).
SEND_TIMEOUT_SECONDS = 60.0
#: The most connections answered at once; one more gets ``503`` at once (held connections
#: used up the process's files, and honest readers waited behind them).
MAX_CONNECTIONS = 64
#: Every answer's Content-Security-Policy: the page's (see there), no framing.
_POLICY = f"{content_security_policy()}; frame-ancestors 'none'"


#: The names the feed publishes, and their content types.
FILES = {
    "index.html": "text/html; charset=utf-8",
    "feed.json": "application/json",
    "releases.csv": "text/csv; charset=utf-8",
    "consistent.csv": "text/csv; charset=utf-8",
    # what the page polls: a few bytes, so feed.json is fetched only when something changed
    "version.json": "application/json",
}


#: One place's series: the stream's name (the records' pattern) and the place's position.
SERIES_PATH = re.compile(r"series/([A-Za-z0-9][A-Za-z0-9_.+-]{0,63})/(0|[1-9][0-9]{0,8})\.json")


def render_series(view: FeedView, path: str) -> str | None:
    """The text of ``series/<stream>/<place>.json``, or None when ``path`` names no place of
    a places stream in the view."""
    match = SERIES_PATH.fullmatch(path)
    if match is None:
        return None
    series = view.series(match.group(1), int(match.group(2)))
    return None if series is None else json.dumps(series, separators=(",", ":"))


def render_file(view: FeedView, source: str, name: str) -> str:
    """The text of one published file (``name`` in :data:`FILES`)."""
    if name == "releases.csv":
        return to_csv(view.release_rows(), RELEASE_COLUMNS)
    if name == "consistent.csv":
        return to_csv(view.consistent_rows(), CONSISTENT_COLUMNS)
    if name == "version.json":
        return json.dumps({"version": view.version})
    document = view.document(source)
    if name == "feed.json":
        return json.dumps(document, separators=(",", ":"))
    return render_page(document)


def render_files(view: FeedView, source: str) -> dict[str, tuple[str, str]]:
    """File name -> (content type, text) of everything the feed publishes."""
    return {name: (kind, render_file(view, source, name)) for name, kind in FILES.items()}


def check_output_dir(output_dir: Path, reads: Path | None = None) -> None:
    """Refuse (:class:`ConfigError`) an ``--output-dir`` whose files would be published beside
    a replay's (its protected dead letters, ledger and snapshot): one holding any file a replay
    writes, the replay directory ``reads`` itself, a directory inside it or one holding it;
    and one that is not a directory."""
    from streamdp.engine.replay import REPLAY_OUTPUT_FILES

    if output_dir.exists() and not output_dir.is_dir():
        raise ConfigError(
            f"--output-dir {str(output_dir)!r} is a file, not a directory: name a directory "
            "for the page and its downloads"
        )
    existing = next((a for a in output_dir.absolute().parents if a.exists()), None)
    if not output_dir.exists() and existing is not None and not existing.is_dir():
        raise ConfigError(
            f"cannot create --output-dir {str(output_dir)!r}: {str(existing)!r} is a file; "
            "name a directory that can be created"
        )
    target = output_dir.resolve()
    if reads is not None:
        replay = reads.resolve()
        if target == replay or replay in target.parents or target in replay.parents:
            raise ConfigError(
                f"--output-dir {str(output_dir)!r} is, is inside or holds the --from directory "
                "(whose dead letters, ledger and snapshot are protected): write the site "
                "to a directory of its own"
            )
    found = [name for name in REPLAY_OUTPUT_FILES if (output_dir / name).exists()]
    if found:
        raise ConfigError(
            f"--output-dir {str(output_dir)!r} holds a replay's files ({', '.join(found)}); "
            "a site written there would publish them beside it: write the site to a directory "
            "of its own"
        )


def write_static(view: FeedView, source: str, output_dir: Path) -> list[Path]:
    """Write the page and its downloads into ``output_dir`` (:func:`check_output_dir` first);
    returns the paths written."""
    check_output_dir(output_dir)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            f"cannot create --output-dir {str(output_dir)!r} ({error.strerror}): name a "
            "directory that can be created"
        ) from error
    written = []
    for name, (_, text) in render_files(view, source).items():
        path = output_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    series_root = (output_dir / "series").resolve()
    for stream, places in view.places_streams().items():
        folder = output_dir / "series" / stream
        if folder.resolve().parent != series_root:  # the records' parsers refuse such names
            raise ConfigError(f"stream name {stream!r} is not a folder name; nothing written")
        folder.mkdir(parents=True, exist_ok=True)
        for place in range(places):
            series = view.series(stream, place)
            assert series is not None
            path = folder / f"{place}.json"
            path.write_text(json.dumps(series, separators=(",", ":")), encoding="utf-8")
            written.append(path)
    return written


class FeedServer:
    """An HTTP/1.1 server on 127.0.0.1 for the feed; ``refresh`` runs before each answer (a
    replay directory re-reads its files there; the Kafka reader fills the view on its own)."""

    def __init__(
        self, view: FeedView, source: str, refresh: Callable[[], None] | None = None
    ) -> None:
        self.view = view
        self.source = source
        self.refresh = refresh
        self._server: asyncio.Server | None = None
        # rendered files of the view's current version (the page polls every few seconds)
        self._rendered: dict[str, bytes] = {}
        self._rendered_version = -1
        self._open = 0  # connections being answered

    async def start(self, port: int) -> int:
        """Listen on 127.0.0.1:``port`` (0: any free port); returns the port."""
        self._server = await asyncio.start_server(self._answer, LOOPBACK, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open += 1
        try:
            if self._open > MAX_CONNECTIONS:
                # what the client sent is read first (closing on unread bytes resets the
                # connection, and the answer with it), for a second at most
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(reader.read(_MAX_REQUEST_BYTES), 1.0)
                status, content_type, body, head_only = _BUSY
            else:
                status, content_type, body, head_only = await self._respond(reader)
            # HEAD: the headers GET would send (its Content-Length too), without the body
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\n"
                f"Content-Security-Policy: {_POLICY}\r\n"
                "X-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("ascii") + (b"" if head_only else body))
            # nor may a client that does not read the answer hold the connection for ever
            await asyncio.wait_for(writer.drain(), SEND_TIMEOUT_SECONDS)
        except (
            ConnectionError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
        ):
            pass
        finally:
            self._open -= 1
            writer.close()
            try:
                await asyncio.wait_for(writer.wait_closed(), SEND_TIMEOUT_SECONDS)
            except TimeoutError:
                writer.transport.abort()  # the client never took the rest: drop it
            except ConnectionError:
                pass

    async def _respond(self, reader: asyncio.StreamReader) -> tuple[str, str, bytes, bool]:
        """(status, content type, body, whether to send the headers only: HEAD)."""
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_SECONDS)
        if len(head) > _MAX_REQUEST_BYTES:
            return (
                "431 Request Header Fields Too Large",
                "text/plain",
                b"request too large\n",
                False,
            )
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if len(parts) != 3 or parts[0] not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"only GET is served\n", False
        head_only = parts[0] == "HEAD"
        path = parts[1].split("?", 1)[0].lstrip("/") or "index.html"
        if self.refresh is not None:
            self.refresh()
        if self._rendered_version != self.view.version:
            self._rendered, self._rendered_version = {}, self.view.version
        body = self._rendered.get(path)
        if body is None:
            text = (
                render_file(self.view, self.source, path)
                if path in FILES
                else render_series(self.view, path)
            )
            if text is None:
                known = ", ".join(f"/{name}" for name in FILES)
                return (
                    "404 Not Found",
                    "text/plain",
                    f"not found; this feed serves {known} and /series/<stream>/<place>.json "
                    "of its places streams\n".encode(),
                    head_only,
                )
            body = text.encode("utf-8")
            self._rendered[path] = body
        kind = FILES.get(path, "application/json")
        return "200 OK", kind, body, head_only


#: The answer to a connection over :data:`MAX_CONNECTIONS`.
_BUSY = ("503 Service Unavailable", "text/plain", b"busy; try again\n", False)


async def serve_live(bootstrap: str, namespace: str, port: int, stop: asyncio.Event) -> None:
    """Serve the feed of ``<namespace>.releases``/``.consistent`` on 127.0.0.1:``port`` until
    ``stop`` is set (the demo runs this in its own event loop)."""
    from streamdp.feed.sources import KafkaTopics

    topics = KafkaTopics(bootstrap, namespace)
    server = FeedServer(FeedView(), topics.public_name())
    await server.start(port)
    try:
        await topics.follow(server.view, stop)
    finally:
        await server.close()
