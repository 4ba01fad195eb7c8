"""Every command in the README's "Using it" section runs as printed (issue 14: "every command
in the README runs as printed on a fresh clone").

The commands are read from the README itself, so an edit there is tested here: a command of a
kind this test does not know how to run fails the test instead of being skipped. They run in a
scratch directory that sees the repository's ``streamdp/examples``, with ``python -m streamdp``
standing for ``./run streamdp`` (what ``./run streamdp`` executes once installed). Placeholders
the README spells out are filled the way its text says: ``PORT`` is the port the ``broker``
command printed. Only additions are made, never changes: the worker gets ``--web-port`` (a free
port, so the test does not depend on 6066 being free).
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from streamdp.broker.loopback import free_loopback_port

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
SERVED_FOR = 120.0  # deadline for a served command to answer or a worker to become ready


def using_it_commands() -> list[list[str]]:
    """The ``./run streamdp ...`` commands of the README's "Using it" section, in order, each
    with continuation lines joined and trailing comments removed."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Using it", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            command = line.split("  #", 1)[0].strip()
            if command.startswith("./run streamdp "):
                commands.append(shlex.split(command)[2:])
    return commands


def _python(argv: list[str]) -> list[str]:
    # -P: the scratch directory's ``streamdp/examples`` must not shadow the installed package
    return [sys.executable, "-P", "-m", "streamdp", *argv]


def _answers(url: str, process: subprocess.Popen[bytes], deadline: float) -> bytes:
    while time.monotonic() < deadline:
        assert process.poll() is None, f"{url}: the command exited with {process.returncode}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bytes(response.read())
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{url} did not answer within {SERVED_FOR} s")


@contextmanager
def _running(argv: list[str], cwd: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(_python(argv), cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield process
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)


def _broker_address(log: Path, process: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + SERVED_FOR
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()[-2000:]
        found = re.search(r"^bootstrap (127\.0\.0\.1:\d+)$", log.read_text(), re.M)
        if found:
            return found.group(1)
        time.sleep(0.3)
    raise AssertionError(f"the broker printed no address: {log.read_text()[-2000:]}")


def test_the_readme_lists_the_commands_this_test_runs() -> None:
    kinds = [argv[0] for argv in using_it_commands()]
    assert kinds.count("plan") >= 1
    assert {"synth", "replay", "broker", "worker", "tail", "feed"} <= set(kinds)


def test_every_using_it_command_runs_as_printed(tmp_path: Path) -> None:
    (tmp_path / "streamdp").mkdir()
    (tmp_path / "streamdp" / "examples").symlink_to(REPO / "streamdp" / "examples")
    commands = using_it_commands()
    batch = [a for a in commands if a[0] in ("plan", "synth", "replay")]
    batch += [a for a in commands if a[0] == "feed" and "--output-dir" in a]
    for argv in batch:  # in README order: synth writes what replay reads, replay what feed reads
        done = subprocess.run(
            _python(argv), check=False, cwd=tmp_path, capture_output=True, timeout=600
        )
        assert done.returncode == 0, (argv, done.stderr.decode()[-2000:])
    assert (tmp_path / "out" / "releases.jsonl").stat().st_size > 0
    assert (tmp_path / "site" / "index.html").is_file()

    served = [a for a in commands if a not in batch]
    unknown = [a for a in served if a[0] not in ("broker", "worker", "tail", "feed")]
    assert not unknown, f"the README has commands this test cannot run: {unknown}"
    (broker_argv,) = [a for a in served if a[0] == "broker"]
    with _running(broker_argv, tmp_path, tmp_path / "broker.log") as broker:
        address = _broker_address(tmp_path / "broker.log", broker)
        port_of = {"PORT": address.split(":")[1]}

        def filled(argv: list[str]) -> list[str]:
            return [re.sub(r"\bPORT\b", lambda m: port_of[m.group(0)], a) for a in argv]

        for argv in (filled(a) for a in served if a[0] in ("worker", "tail", "feed")):
            deadline = time.monotonic() + SERVED_FOR
            if argv[0] == "worker":
                web = free_loopback_port()
                with _running([*argv, "--web-port", str(web)], tmp_path, tmp_path / "w.log") as w:
                    while b'"ready": true' not in _answers(
                        f"http://127.0.0.1:{web}/status", w, deadline
                    ).replace(b'"ready":true', b'"ready": true'):
                        assert time.monotonic() < deadline, (tmp_path / "w.log").read_text()
                        time.sleep(0.5)
            elif argv[0] == "tail":
                with _running(argv, tmp_path, tmp_path / "tail.log") as tail:
                    while "reading" not in (tmp_path / "tail.log").read_text():
                        assert tail.poll() is None, (tmp_path / "tail.log").read_text()
                        assert time.monotonic() < deadline, "tail never started reading"
                        time.sleep(0.3)
            else:  # a served feed page, from a replay or live from the broker
                port = argv[argv.index("--port") + 1]
                with _running(argv, tmp_path, tmp_path / "feed.log") as feed:
                    page = _answers(f"http://127.0.0.1:{port}/", feed, deadline)
                    assert b"<html" in page.lower()
