"""``streamdp demo`` end to end: broker, worker and producers start, releases and a consistent
revision reach the terminal, and every process is gone after a timed or signalled stop.

Each test runs the real command as a subprocess with stdout on a pipe (the plain-lines mode).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from streamdp.broker import free_loopback_port

pytestmark = pytest.mark.timeout(120)

RELEASE = re.compile(
    r"^release restaurant-items epoch (\d+) period (\d+) \(\d{4}-\d\d-\d\d\) period count / "
    r"running total ±95%: cola (-?[\d,]+)±([\d,]+) / (-?[\d,]+)±([\d,]+)"
)


def _demo(*extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "streamdp", "demo", "--web-port", str(free_loopback_port()), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )


def _pids(text: str) -> dict[str, int]:
    return {kind: int(pid) for kind, pid in re.findall(r"(broker|worker) pid (\d+)", text)}


def _alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _assert_all_gone(text: str) -> None:
    pids = _pids(text)
    assert set(pids) == {"broker", "worker"}, text[:2000]
    for kind, pid in pids.items():
        assert not _alive(pid), f"the demo's {kind} (pid {pid}) outlived it"


def test_timed_demo_prints_releases_and_a_revision_then_stops_everything() -> None:
    demo = _demo("--duration", "32", "--pace", "0.4")  # the feeds start after 15 s
    out, _ = demo.communicate(timeout=100)
    assert demo.returncode == 0, out[-3000:]
    lines = out.splitlines()
    assert any("OpenDP exact discrete Laplace (secure sampler)" in line for line in lines)
    assert "INSECURE" not in out

    releases = [m for m in map(RELEASE.match, lines) if m]
    assert len(releases) >= 5, out[-3000:]
    periods = [(int(m[1]), int(m[2])) for m in releases]
    assert periods == sorted(set(periods)), "each period is printed once, in order"
    totals = [int(m[5].replace(",", "")) for m in releases]
    assert max(totals) > 1000, "about 240 colas a day add up to thousands"

    revisions = [line for line in lines if line.startswith("consistent restaurant-items revision")]
    assert revisions, out[-3000:]
    dead = re.findall(r"dead letters \((\d+); a record two streams refuse counts twice\)", out)
    assert dead
    assert int(dead[-1]) > 0, "the bad records reached the dead-letter topic"
    assert "stopped: worker exited with code 0" in out, out[-3000:]
    _assert_all_gone(out)


def test_ctrl_c_stops_the_demo_cleanly() -> None:
    """SIGINT to the front process (what a terminal's Ctrl-C delivers; the session runs in its
    own process group) stops the worker, the producers and the broker; exit code 0."""
    demo = _demo("--pace", "0.3", "--insecure-seed", "5")
    assert demo.stdout is not None
    seen: list[str] = []
    released = threading.Event()

    def read() -> None:
        assert demo.stdout is not None
        for line in demo.stdout:
            seen.append(line)
            if line.startswith("release "):
                released.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not released.wait(timeout=60):
        demo.kill()
        pytest.fail("no release within 60 s:\n" + "".join(seen)[-3000:])
    os.kill(demo.pid, signal.SIGINT)
    code = demo.wait(timeout=60)
    reader.join(timeout=10)
    demo.stdout.close()
    out = "".join(seen)
    assert code == 0, out[-3000:]
    assert "INSECURE seeded sampler (--insecure-seed 5)" in out
    assert "stopped: worker exited with code 0" in out
    _assert_all_gone(out)
