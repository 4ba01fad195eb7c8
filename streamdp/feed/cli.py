"""``streamdp feed``: serve (or write as static files) the public statistics page.

From a replay's output directory (``--from DIR``: its ``releases.jsonl`` and ``consistent.jsonl``
only) or live from Kafka (``--bootstrap HOST:PORT``: ``<ns>.releases`` and ``<ns>.consistent``
only, read from the beginning and then followed). Served on 127.0.0.1 only; ``--output-dir``
writes ``index.html``, ``feed.json``, ``releases.csv``, ``consistent.csv``, ``version.json`` (and
a places stream's ``series/``) and exits.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path

from streamdp.bootstrap_address import check_bootstrap
from streamdp.errors import ConfigError
from streamdp.feed.console import IgnoredReporter
from streamdp.feed.model import FeedView
from streamdp.feed.server import LOOPBACK, FeedServer, check_output_dir, write_static
from streamdp.feed.sources import KafkaTopics, ReplayDirectory
from streamdp.topic_namespace import DEFAULT_NAMESPACE, check_namespace

DEFAULT_PORT = 8750
#: How long ``--output-dir`` with ``--bootstrap`` waits to read the topics up to their ends.
CATCH_UP_SECONDS = 60.0


def register(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--from",
        dest="from_dir",
        metavar="DIR",
        type=Path,
        help="a `streamdp replay --output-dir`: reads only its releases.jsonl and "
        "consistent.jsonl (re-read as they grow)",
    )
    source.add_argument(
        "--bootstrap",
        metavar="HOST:PORT",
        help="read the release topics live from this Kafka broker (from the beginning, then "
        "following)",
    )
    parser.add_argument(
        "--topic-namespace",
        default=None,
        metavar="NS",
        help=f"with --bootstrap: read NS.releases and NS.consistent (default: {DEFAULT_NAMESPACE})",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"serve on 127.0.0.1:PORT (default {DEFAULT_PORT}; 0 picks a free port; not with "
        "--output-dir)",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        metavar="DIR",
        default=None,
        help="write index.html, feed.json, releases.csv, consistent.csv, version.json (and a "
        "places stream's series/ of one file per place) into DIR and exit "
        "instead of serving (with --bootstrap: after reading the topics to their current end); "
        "a directory of its own, never the --from directory or one holding a replay's files",
    )


def _check(args: argparse.Namespace) -> None:
    """Refuse what the command would otherwise ignore or misread; fill in the defaults."""
    if args.from_dir is not None and args.topic_namespace is not None:
        raise ConfigError(
            "--topic-namespace names the Kafka topics of --bootstrap; --from reads the files "
            "releases.jsonl and consistent.jsonl of its directory: drop one of the two"
        )
    if args.output_dir is not None and args.port is not None:
        raise ConfigError(
            "--port is where the page is served; --output-dir writes the files and serves "
            "nothing: drop one of the two"
        )
    if args.output_dir is not None:  # before anything is read: refused in one line
        check_output_dir(args.output_dir, args.from_dir)
    if args.topic_namespace is None:
        args.topic_namespace = DEFAULT_NAMESPACE
    if args.port is None:
        args.port = DEFAULT_PORT
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be 0..65535, got {args.port}")
    if args.bootstrap is not None:
        check_bootstrap(args.bootstrap)
    check_namespace(args.topic_namespace)


def run(args: argparse.Namespace) -> int:
    _check(args)
    view = FeedView()
    report = IgnoredReporter(view)  # records not shown, by reason: on stderr, never the page
    if args.from_dir is not None:
        directory = ReplayDirectory(args.from_dir)
        directory.read_new(view)
        report()
        if args.output_dir is not None:
            return _written(view, directory.public_name(), args.output_dir)

        def refresh() -> None:
            directory.read_new(view)
            report()

        server = FeedServer(view, directory.public_name(), refresh=refresh)
        return asyncio.run(_serve(server, args.port, None, directory.describe()))
    topics = KafkaTopics(args.bootstrap, args.topic_namespace)
    if args.output_dir is not None:
        asyncio.run(topics.read_to_end(view, CATCH_UP_SECONDS))
        report()
        return _written(view, topics.public_name(), args.output_dir)
    server = FeedServer(view, topics.public_name())
    return asyncio.run(_serve(server, args.port, topics, topics.describe(), report))


def _written(view: FeedView, source: str, output_dir: Path) -> int:
    series = 0
    for path in write_static(view, source, output_dir):
        if path.parent.parent.name == "series" and path.parent.parent.parent == output_dir:
            series += 1  # one file per place of a places stream: counted, not listed
        else:
            print(f"wrote {path}")  # noqa: T201
    if series:
        print(f"wrote {series} place series under {output_dir / 'series'}")  # noqa: T201
    return 0


async def _serve(
    server: FeedServer,
    port: int,
    topics: KafkaTopics | None,
    where: str,
    report: Callable[[], None] | None = None,
) -> int:
    """Serve ``server`` on loopback ``port``; ``where``: what it reads, for the console;
    ``report``: called after each batch read from ``topics``."""
    try:
        bound = await server.start(port)
    except OSError as error:
        raise ConfigError(
            f"cannot listen on {LOOPBACK}:{port} ({error.strerror}): pick another --port"
        ) from error

    def announce() -> None:
        print(f"streamdp feed: page at http://{LOOPBACK}:{bound}/, reading {where}", flush=True)  # noqa: T201

    stop = asyncio.Event()
    try:
        if topics is None:
            announce()
            await stop.wait()
        else:
            await topics.follow(server.view, stop, connected=announce, after_batch=report)
    finally:
        await server.close()
    return 0
