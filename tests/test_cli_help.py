"""Every option of every ``streamdp`` subcommand says what it does (issue 14: several had no
help text). Walks the real parsers, so a flag added without help fails here."""

from __future__ import annotations

import argparse

import pytest

from streamdp.cli import COMMANDS, build_parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps sub-parsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _walk(name: str, parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """``parser`` and every nested sub-parser, with their command paths."""
    found = [(name, parser)]
    for child, sub in _subparsers(parser).items():
        found += _walk(f"{name} {child}", sub)
    return found


def test_every_command_is_registered() -> None:
    assert set(_subparsers(build_parser())) == set(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_has_help(command: str) -> None:
    root = _subparsers(build_parser(only=command))[command]
    missing = []
    for path, parser in _walk(command, root):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            text = (action.help or "").strip()
            if not text or text == argparse.SUPPRESS:
                names = "/".join(action.option_strings) or action.dest
                missing.append(f"streamdp {path} {names}")
    assert not missing, f"options without help: {missing}"
