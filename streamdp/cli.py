"""Command-line entry point: ``streamdp <command> ...``.

Each command lives in its own module exposing ``register(parser)`` (add arguments to the
sub-parser it is given) and ``run(args) -> int`` (the exit code). Commands are listed in
``COMMANDS``; a module is imported only when its command is used, so ``streamdp plan`` never
pays for importing Faust.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Protocol, cast

from streamdp import __version__
from streamdp.errors import StreamdpError

# command name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("streamdp.planner.cli", "accuracy planner: expected error before spending budget"),
    "worker": ("streamdp.worker_cli", "run a release daemon worker (faust-streaming on Kafka)"),
    "demo": (
        "streamdp.demo_cli",
        "live demo: embedded broker, one worker, synthetic producers, releases as they land",
    ),
    "replay": ("streamdp.replay_cli", "run the release engine over a JSON-lines file"),
    "synth": (
        "streamdp.synth_cli",
        (
            "write made-up test events (restaurant orders, hospital admissions, census records) "
            "as JSON lines"
        ),
    ),
    "produce": (
        "streamdp.produce_cli",
        "send synthetic events live to a broker (or write a spec whose periods start now)",
    ),
    "tail": ("streamdp.tail_cli", "print a topic (releases, dead letters) one line per record"),
    "broker": (
        "streamdp.broker_cli",
        "a broker on loopback (embedded Tansu, or Apache Kafka) with a spec's topics",
    ),
    "feed": (
        "streamdp.feed.cli",
        "public statistics page (series, 95% bands, CSV/JSON) from the release topics or a replay",
    ),
}


class CommandModule(Protocol):
    def register(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _load(name: str) -> CommandModule:
    module_name, _ = COMMANDS[name]
    return cast(CommandModule, importlib.import_module(module_name))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamdp",
        description="Differentially private continual release from event streams.",
    )
    parser.add_argument("--version", action="version", version=f"streamdp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        # argparse %-formats help strings ("%(default)s"): a literal % must be doubled there
        command_parser = sub.add_parser(
            name, help=help_text.replace("%", "%%"), description=help_text
        )
        if only is None or only == name:
            _load(name).register(command_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # aiokafka logs connection failures; with no logging set up (the short commands) Python's
    # last-resort handler printed them raw beside streamdp's own one-line error. Records still
    # reach any handler a command configures (the worker's); only that fallback is silenced.
    logging.getLogger("aiokafka").addHandler(logging.NullHandler())
    arguments = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in arguments if not a.startswith("-")), None)
    parser = build_parser(only=command if command in COMMANDS else None)
    args = parser.parse_args(arguments)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return _load(args.command).run(args)
    except StreamdpError as error:
        print(f"streamdp {args.command}: error: {error}", file=sys.stderr)  # noqa: T201
        return 2
    except KeyboardInterrupt:
        return 130
