"""The worker's diagnostic dump (``streamdp.daemon.diagnostics``): where tasks wait, through
coroutines, tasks, Faust-style awaitable wrappers and async generators; code locations only;
a failing partition report never stops it. The signal wiring on a live worker is tested in
``tests/test_daemon_broker.py``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from streamdp.daemon.diagnostics import install_dump_signals, suspension_chain, task_report


async def waits_on(event: asyncio.Event) -> None:
    await event.wait()


async def calls_into(event: asyncio.Event) -> None:
    await waits_on(event)


async def awaits_a_task(event: asyncio.Event) -> None:
    await asyncio.ensure_future(calls_into(event))


class AwaitsLikeAFaustAgent:
    """An object whose ``__await__`` hands out a coroutine's, as Faust's actors do."""

    def __init__(self, event: asyncio.Event) -> None:
        self._coroutine = calls_into(event)

    def __await__(self) -> Any:
        return self._coroutine.__await__()


async def awaits_an_agent(event: asyncio.Event) -> None:
    await AwaitsLikeAFaustAgent(event)


async def generates(event: asyncio.Event) -> AsyncIterator[int]:
    await waits_on(event)
    yield 1


async def iterates(event: asyncio.Event) -> None:
    async for _ in generates(event):
        pass


@pytest.mark.parametrize(
    ("outer", "path"),
    [
        (calls_into, ["calls_into", "waits_on", "Event.wait"]),
        (awaits_a_task, ["awaits_a_task", "calls_into", "waits_on", "Event.wait"]),
        (awaits_an_agent, ["awaits_an_agent", "calls_into", "waits_on", "Event.wait"]),
        (iterates, ["iterates", "generates", "waits_on", "Event.wait"]),
    ],
)
def test_the_chain_follows_every_kind_of_await_to_the_innermost_wait(outer, path) -> None:  # type: ignore[no-untyped-def]
    async def go() -> tuple[str, list[str]]:
        event = asyncio.Event()
        task = asyncio.ensure_future(outer(event))
        await asyncio.sleep(0.01)
        chain = suspension_chain(task)
        report = task_report()
        event.set()
        await task
        assert suspension_chain(task) == "done"
        return chain, report

    chain, report = asyncio.run(go())
    functions = [step.split(" (")[0] for step in chain.split(" -> ")]
    assert [f for f in functions if f in path] == path, chain
    assert "test_daemon_diagnostics.py:" in chain  # a code location per step
    assert any(line.endswith(chain) and line.startswith("1 x ") for line in report), report


def test_the_report_counts_tasks_waiting_at_the_same_place_and_shows_no_values() -> None:
    secret = "do-not-print-this-value"

    async def holds(value: str, event: asyncio.Event) -> None:
        assert value  # a local variable the dump must not show
        await event.wait()

    async def go() -> list[str]:
        event = asyncio.Event()
        tasks = [asyncio.ensure_future(holds(secret, event)) for _ in range(3)]
        await asyncio.sleep(0.01)
        report = task_report()
        event.set()
        await asyncio.gather(*tasks)
        return report

    report = asyncio.run(go())
    assert any(line.startswith("3 x ") and "holds" in line for line in report), report
    assert secret not in "\n".join(report)


def test_the_signals_log_the_report_and_a_failing_partition_view_does_not_stop_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = SimpleNamespace()

    def broken() -> list[str]:
        raise RuntimeError("no consumer yet")

    install_dump_signals(worker, lambda: ["admissions[0]: processed to 7"])
    first = worker._on_sigusr1
    install_dump_signals(worker, broken)
    assert worker._on_sigusr1 is worker._on_sigusr2

    async def go() -> None:
        first()
        worker._on_sigusr2()

    with caplog.at_level(logging.WARNING, logger="streamdp.daemon"):
        asyncio.run(go())
    dumps = [r.getMessage() for r in caplog.records if "diagnostic dump" in r.getMessage()]
    assert len(dumps) == 2
    assert "admissions[0]: processed to 7" in dumps[0]
    assert "input partitions unavailable: RuntimeError('no consumer yet')" in dumps[1]
    assert "go (test_daemon_diagnostics.py:" in dumps[0]  # the task that was running


def test_under_fausts_own_command_line_sigusr1_logs_the_dump_not_frame_locals() -> None:
    """Issue 26: ``faust -A streamdp.daemon.faust_app worker`` builds its own Worker, whose
    SIGUSR1 (mode's) logged every frame's locals, a state write with raw sums among them."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    program = (
        "import asyncio, logging, sys\n"
        "logging.basicConfig(stream=sys.stdout)\n"
        "import faust\n"
        "import streamdp.daemon.faust_app\n"
        "async def signal(): faust.Worker._on_sigusr1(None); faust.Worker._on_sigusr2(None)\n"
        "asyncio.run(signal())\n"
    )
    env = {**os.environ, "STREAMDP_CONFIG": str(repo / "streamdp/examples/restaurant.toml")}
    done = subprocess.run(
        [sys.executable, "-c", program],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("diagnostic dump (SIGUSR1/SIGUSR2)") == 2
    assert "f_locals" not in done.stdout
    assert "signal (<string>:" in done.stdout  # the task report, not mode's frame dump
