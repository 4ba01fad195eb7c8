"""Every option of every ``streamdp`` subcommand says what it does (issue 14: several had no
help text). Walks the real parsers, so a flag added without help fails here."""

from __future__ import annotations

import argparse

import pytest

from streamdp.cli import COMMANDS, build_parser, main


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


def _help_paths() -> list[list[str]]:
    """Every command path's ``--help`` invocation: the top level and every (nested) command."""
    paths: list[list[str]] = [["--help"]]
    for command in sorted(COMMANDS):
        root = _subparsers(build_parser(only=command))[command]
        paths += [[*path.split(), "--help"] for path, _ in _walk(command, root)]
    return paths


@pytest.mark.parametrize("argv", _help_paths(), ids=" ".join)
def test_every_help_page_prints(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 26: ``streamdp --help`` crashed on the "%" of a command's one-line help."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: streamdp")
    if argv == ["--help"]:
        for command in COMMANDS:
            assert command in out
        assert "95% bands" in out


def test_bare_streamdp_prints_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2  # no command given: the help, and the exit code of a usage error
    out = capsys.readouterr().out
    assert out.startswith("usage: streamdp")
    assert all(command in out for command in COMMANDS)
