"""The feed server's walls (security audit of 2026-11-28):

- a client that never finishes its request's headers is cut off after
  ``REQUEST_TIMEOUT_SECONDS`` (one header line now and then held a connection for ever), and
  connections beyond ``MAX_CONNECTIONS`` are answered ``503`` at once, so a crowd of held
  connections cannot use up the process's files; an honest reader is served again after;
- every answer carries a Content-Security-Policy that allows exactly the page's own inline
  script and style (their hashes, computed here from the page as served), fetches from its own
  origin and no framing; a static copy carries the same policy in a ``<meta>`` element. The
  browser tests of ``tests/test_feed.py`` draw the page under it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re

import pytest

import streamdp.feed.server as feed_server
from streamdp.feed.model import FeedView
from streamdp.feed.page import content_security_policy, render_page
from streamdp.feed.server import FeedServer


async def _get(port: int, path: str = "/") -> tuple[str, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return status, headers, body


def test_held_connections_are_cut_off_and_a_crowd_is_turned_away(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(feed_server, "REQUEST_TIMEOUT_SECONDS", 0.5)
    monkeypatch.setattr(feed_server, "MAX_CONNECTIONS", 3)

    async def scenario() -> None:
        server = FeedServer(FeedView(), "test")
        port = await server.start(0)
        try:
            held = []
            for _ in range(3):  # a request's first line, and no end to its headers
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                await writer.drain()
                held.append((reader, writer))
            await asyncio.sleep(0.1)
            status, _, body = await _get(port)  # the fourth, while three are held
            assert status == "HTTP/1.1 503 Service Unavailable"
            assert body == b"busy; try again\n"
            for reader, writer in held:  # each is closed without an answer
                assert await asyncio.wait_for(reader.read(), 10) == b""
                writer.close()
            status, headers, body = await _get(port)  # and an honest reader is served
            assert status == "HTTP/1.1 200 OK"
            assert headers["Content-Type"].startswith("text/html")
        finally:
            await server.close()

    asyncio.run(scenario())


def _inline(html: str, tag: str) -> list[str]:
    """The contents of the ``tag`` elements of ``html`` without a ``type`` or ``src``."""
    return re.findall(rf"<{tag}>(.*?)</{tag}>", html, flags=re.DOTALL)


def _hash_source(text: str) -> str:
    digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
    return f"'sha256-{digest}'"


def test_every_answer_carries_a_policy_allowing_only_the_pages_own_script_and_style() -> None:
    async def scenario() -> tuple[list[tuple[str, dict[str, str], bytes]]]:
        server = FeedServer(FeedView(), "test")
        port = await server.start(0)
        try:
            return ([await _get(port, path) for path in ("/", "/feed.json", "/nothing")],)
        finally:
            await server.close()

    (answers,) = asyncio.run(scenario())
    for _, headers, _ in answers:
        policy = headers["Content-Security-Policy"]
        assert policy == f"{content_security_policy()}; frame-ancestors 'none'"
    page = answers[0][2].decode()
    directives = dict(d.strip().split(" ", 1) for d in content_security_policy().split(";"))
    scripts, styles = _inline(page, "script"), _inline(page, "style")
    assert len(scripts) == 1  # the data script has a type: it is not run
    assert len(styles) == 1
    assert directives["script-src"] == _hash_source(scripts[0])
    assert directives["style-src"] == _hash_source(styles[0])
    assert directives["default-src"] == "'none'"
    assert directives["connect-src"] == "'self'"
    # a static copy carries the same policy (all but frame-ancestors, which a meta cannot)
    static = render_page(FeedView().document("test"))
    meta = f'<meta http-equiv="Content-Security-Policy" content="{content_security_policy()}">'
    assert meta in static
