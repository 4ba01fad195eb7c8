"""The command and code examples of README.md and docs/ match the code (issue 26: an import
that failed, ``promtool test rules`` without its file, flags that drifted).

Checked without running anything long: every ``streamdp COMMAND ...`` (or ``./run streamdp``)
example names a command that exists and only options that command (or its sub-command) has;
every ``import`` of streamdp in a Python block imports; every ``promtool test rules`` names
its file. The README's "Using it" commands are also run end to end
(``tests/test_readme_commands.py``).
"""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

from streamdp.cli import COMMANDS, build_parser

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings}


def command_examples() -> list[tuple[str, str]]:
    """``(where, command)`` for every ``streamdp COMMAND ...`` in a code block or inline code."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        pieces = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
        # inline code may wrap onto the next line (not across a paragraph)
        inline = re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
        pieces += [" ".join(p.split()) for p in inline if "\n\n" not in p]
        for piece in pieces:
            joined = re.sub(r"\\\n\s*", " ", piece)
            for line in joined.splitlines():
                found.extend(
                    (path.name, "streamdp " + match.group(1).split("  #")[0])
                    for match in re.finditer(r"(?:^|[\s(;|&])(?:\./run )?streamdp ([a-z].*)", line)
                )
    return found


def test_the_docs_have_command_examples() -> None:
    examples = command_examples()
    assert len(examples) > 30
    # "streamdp" followed by a word that is no command is prose ("streamdp workers: ..."),
    # unless options follow it: then it is a command line naming a command that does not exist
    unknown = [
        (where, command)
        for where, command in examples
        if command.split()[1].strip("`.,:;)") not in COMMANDS and " --" in command
    ]
    assert not unknown, f"examples of commands that do not exist: {unknown}"


@pytest.mark.parametrize(
    ("where", "command"),
    [(w, c) for w, c in command_examples() if c.split()[1].strip("`.,:;)") in COMMANDS],
)
def test_every_documented_command_exists_with_the_options_it_shows(
    where: str, command: str
) -> None:
    words = command.split()
    name = words[1].strip("`.,:;)")
    parser = _subparsers(build_parser(only=name))[name]
    options = _options(parser)
    rest = words[2:]
    nested = _subparsers(parser)
    if rest and rest[0] in nested:
        options |= _options(nested[rest[0]])
    shown = {w.split("=")[0].strip("`.,:;)[]") for w in rest if w.startswith("--")}
    unknown = sorted(o for o in shown if o not in options and o != "--")
    assert not unknown, f"{where}: {command!r} shows options streamdp {name} lacks: {unknown}"


def python_imports() -> list[tuple[str, str]]:
    found = []
    for path in DOCS:
        for block in re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
            found.extend(
                (path.name, line.strip())
                for line in block.splitlines()
                if re.match(r"^(from streamdp\S* import |import streamdp)", line.strip())
            )
    return found


@pytest.mark.parametrize(("where", "line"), python_imports())
def test_every_documented_import_imports(where: str, line: str) -> None:
    module = line.split()[1]
    imported = importlib.import_module(module)
    if line.startswith("from "):
        for name in line.split(" import ", 1)[1].replace(",", " ").split():
            assert hasattr(imported, name), f"{where}: {line!r}: {module} has no {name}"


def test_promtool_examples_name_their_rule_file() -> None:
    for path in [*DOCS, *sorted((REPO / "deploy").rglob("*.y*ml"))]:
        for match in re.finditer(r"promtool test rules([^`\n]*)", path.read_text("utf-8")):
            assert ".yml" in match.group(1), f"{path.name}: {match.group(0)!r} names no file"
