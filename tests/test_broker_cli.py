"""``streamdp broker``: the embedded broker alone, with a spec's topics, until SIGTERM.

It makes the README's worker and tail examples runnable on a fresh machine: the command prints
the bootstrap address and the worker command line, the topics it names exist (a worker started
from that line becomes ready), and SIGTERM stops it with status 0."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from streamdp.broker.loopback import free_loopback_port

pytestmark = pytest.mark.slow
SPEC = Path(__file__).resolve().parents[1] / "streamdp" / "examples" / "restaurant.toml"


def _lines_until(process: subprocess.Popen[str], marker: str, timeout: float) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
        if line.startswith(marker):
            return lines
    raise AssertionError(f"no {marker!r} line within {timeout} s: {lines}")


def test_broker_command_serves_a_spec_whose_worker_becomes_ready(tmp_path: Path) -> None:
    broker = subprocess.Popen(
        [sys.executable, "-m", "streamdp", "broker", "--config", str(SPEC), "--app-id", "t1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    worker = None
    log = (tmp_path / "worker.log").open("wb")
    try:
        lines = _lines_until(broker, "Ctrl-C", 60)
        bootstrap = next(line.split()[1] for line in lines if line.startswith("bootstrap "))
        command = next(line.split(": ", 1)[1] for line in lines if line.startswith("run a worker"))
        assert "restaurant-orders" in next(line for line in lines if line.startswith("created"))
        port = free_loopback_port()
        argv = [*command.split()[1:], "--web-port", str(port), "--data-dir", str(tmp_path / "d")]
        worker = subprocess.Popen(
            [sys.executable, "-m", "streamdp", *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 90
        ready = False
        while time.monotonic() < deadline and not ready:
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as r:
                    ready = json.loads(r.read())["ready"]
            except OSError:
                time.sleep(0.5)
        assert ready, (tmp_path / "worker.log").read_text()[-3000:]
        assert bootstrap.startswith("127.0.0.1:")
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=30)
        log.close()
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(timeout=30) == 0
        assert broker.stdout is not None
        broker.stdout.close()
