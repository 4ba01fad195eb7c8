"""Fatal problems end a worker once, with one clear line and a distinct exit status; SIGTERM is
honoured within seconds in every state (issues 16 and 17; docs/operating.md, "Exit statuses").

- ``fatal_exit`` maps every kind of error to its status and line (unit);
- a worker process whose app, task or producer crashes exits with that status and nothing else
  (real process, no broker: the crash is injected where Faust reports it);
- on the embedded broker: a spec edited under existing state exits 78 once (not restarted,
  no traceback); a missing topic exits 78 before Faust starts; a ready worker stops within the
  stop deadline; a worker pointed at a closed port stops at once on SIGTERM.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pytest
from aiokafka.errors import MessageSizeTooLargeError
from daemon_harness import Worker, create_topics, lines_as_records, make_scenario, produce
from faust.exceptions import ProducerSendError

from streamdp.broker import EmbeddedBroker
from streamdp.broker.loopback import free_loopback_port
from streamdp.daemon.app import create_app
from streamdp.daemon.exits import fatal_exit
from streamdp.daemon.routing import OutputTopics
from streamdp.daemon.runtime import WorkerRuntime
from streamdp.daemon.settings import DaemonSettings
from streamdp.daemon.topology import required_topics
from streamdp.errors import (
    EXIT_CONFIG,
    EXIT_CRASH,
    EXIT_INPUT_GAP,
    EXIT_WRITE_FAILED,
    BudgetError,
    ConfigError,
    InputGapError,
    MembershipLostError,
    StateError,
)

SPEC = Path(str(resources.files("streamdp").joinpath("examples", "restaurant.toml")))
STATUSES = {EXIT_CONFIG, EXIT_CRASH, EXIT_INPUT_GAP, EXIT_WRITE_FAILED}


# ---------------------------------------------------------------- unit: status and line


@pytest.mark.parametrize(
    ("error", "status", "words"),
    [
        (StateError("snapshot was taken under a different configuration"), 78, "--app-id"),
        (BudgetError("would bring source 'x' to epsilon 2, over its cap 1"), 78, "epsilon_cap"),
        (ConfigError("topic t does not exist"), 78, "Restarting as is fails"),
        (InputGapError("offset gap"), 75, "restart me"),
        (MembershipLostError("no answer from the group coordinator"), 75, "session timeout"),
        (
            ProducerSendError(f"Error while sending: {MessageSizeTooLargeError()!r}"),
            74,
            "size limit",
        ),
        (MessageSizeTooLargeError(), 74, "read again after a restart"),
        (KeyError("x"), 70, "This is a bug"),
    ],
)
def test_every_fatal_error_has_its_status_and_one_actionable_line(
    error: BaseException, status: int, words: str
) -> None:
    got, line = fatal_exit(error)
    assert got == status
    assert f"exit status {status}" in line
    assert words in line
    assert "\n" not in line
    assert len(STATUSES) == 4  # distinct


def test_an_input_gap_line_shows_its_offsets_only_where_input_volume_may_go() -> None:
    gap = InputGapError(
        "input orders[1] jumped past records below the reader", "from offset 4 to 9"
    )
    _, public = fatal_exit(gap)
    _, protected = fatal_exit(gap, show_offsets=True)
    assert "orders[1]" in public
    assert "offset" not in public.split("]", 1)[1]
    assert "9" not in public.split("]", 1)[1]
    assert "(from offset 4 to 9)" in protected
    assert "exit status 75" in protected


def test_an_unexpected_error_line_names_the_place_but_never_the_message() -> None:
    try:
        "restaurant-orders|o2|40|x\ud800-SECRET".encode()
    except UnicodeEncodeError as error:
        status, line = fatal_exit(error)
    assert status == EXIT_CRASH
    assert "UnicodeEncodeError raised at" in line
    assert "test_worker_exits.py" in line
    assert "SECRET" not in line


def test_a_fatal_worker_is_not_ready(tmp_path: Path) -> None:
    _, runtime = create_app(DaemonSettings(config=SPEC, data_dir=tmp_path))
    assert isinstance(runtime, WorkerRuntime)

    class NoSources:
        def engines(self) -> dict[str, object]:
            return {}

    runtime.service = NoSources()  # type: ignore[assignment]
    runtime.recovered = lambda: True
    assert runtime.ready
    runtime.fatal = "fatal configuration problem, exit status 78: ..."
    assert not runtime.ready
    assert runtime.status()["ready"] is False


# ---------------------------------------------------------------- real process, injected crash

CRASH_SCRIPT = textwrap.dedent(
    """
    import asyncio, logging, sys
    from pathlib import Path
    from aiokafka.errors import MessageSizeTooLargeError
    from faust.exceptions import ProducerSendError
    from streamdp.daemon.app import create_app
    from streamdp.daemon.settings import DaemonSettings
    from streamdp.errors import StateError

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    app, runtime = create_app(DaemonSettings(config=Path(sys.argv[1]), data_dir=Path(sys.argv[2])))
    how = sys.argv[3]
    if how == "producer":  # the producer buffer's send failed: Faust marks its parents crashed
        app.producer.buffer._crash(ProducerSendError(repr(MessageSizeTooLargeError())))
        app._crash(ProducerSendError(repr(MessageSizeTooLargeError())))
    elif how == "state":  # a timer or task raised: Faust awaits app.crash
        asyncio.run(app.crash(StateError("snapshot was taken under a different configuration")))
    else:
        def fail():
            raise ValueError("raw record x-SECRET-y")
        try:
            fail()
        except ValueError as error:
            asyncio.run(app.crash(error))
    print("STILL RUNNING")
    """
)


@pytest.mark.parametrize(
    ("how", "status"),
    [("producer", EXIT_WRITE_FAILED), ("state", EXIT_CONFIG), ("bug", EXIT_CRASH)],
)
def test_a_crash_that_faust_would_survive_ends_the_process_with_its_status(
    tmp_path: Path, how: str, status: int
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, str(SPEC), str(tmp_path), how],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == status, output
    assert "STILL RUNNING" not in output
    fatal = [line for line in output.splitlines() if line.startswith("CRITICAL")]
    assert len(fatal) == 1, output
    assert f"exit status {status}" in fatal[0]
    assert "Traceback" not in output
    assert "SECRET" not in output


# ---------------------------------------------------------------- real worker on the broker


def _wait_exit(worker: Worker, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = worker.process.poll()
        if code is not None:
            return code
        time.sleep(0.2)
    return None


def _scenario_topics(
    broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> tuple[Path, str, OutputTopics, dict[str, int], object]:
    suffix = unique_name("x")
    scenario = make_scenario(periods=4, rate=4, suffix=suffix)
    config = tmp_path / "spec.toml"
    config.write_text(scenario.spec_text)
    app_id = unique_name("exits")
    topics = OutputTopics.in_namespace(unique_name("ns"))
    settings = DaemonSettings(
        config=config, bootstrap=broker.bootstrap, partitions=2, app_id=app_id, topics=topics
    )
    return config, app_id, topics, required_topics(scenario.spec, settings), scenario


def test_a_spec_edited_under_existing_state_exits_78_once_with_one_line(
    broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    config, app_id, topics, _, scenario = _scenario_topics(broker, unique_name, tmp_path)
    create_topics(broker, scenario, config, 2, app_id=app_id, topics=topics)  # type: ignore[arg-type]
    first = Worker(
        broker, config, app_id=app_id, partitions=2, data_dir=tmp_path / "d1",
        log_path=tmp_path / "first.log", namespace=topics.releases.rsplit(".", 1)[0],
    )  # fmt: skip
    first.wait_ready()
    produce(broker, lines_as_records(scenario, stop=40))  # type: ignore[arg-type]
    # state is written once the worker has checkpointed some input
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = first.status() or {}
        if any(s.get("periods_released", 0) for s in status.get("streams", {}).values()):
            break
        time.sleep(0.3)
    assert first.stop() == 0
    config.write_text(config.read_text().replace("epsilon = 1.0", "epsilon = 0.9", 1))

    second = Worker(
        broker, config, app_id=app_id, partitions=2, data_dir=tmp_path / "d2",
        log_path=tmp_path / "second.log", namespace=topics.releases.rsplit(".", 1)[0],
    )  # fmt: skip
    assert _wait_exit(second, 90) == EXIT_CONFIG, second.log_tail()
    time.sleep(second.RESTART_DELAY + 1)  # the supervisor restarts status 75 only
    assert second.restarts == 0
    assert second.process.poll() == EXIT_CONFIG
    log = (tmp_path / "second.log").read_text(errors="replace")
    fatal = [line for line in log.splitlines() if "exit status 78" in line]
    assert len(fatal) == 1, log
    assert "different configuration" in fatal[0]
    assert "--app-id" in fatal[0]
    assert "Traceback" not in log
    second.stop()


def test_a_missing_topic_exits_78_before_the_worker_starts(
    broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    config, app_id, topics, required, _ = _scenario_topics(broker, unique_name, tmp_path)
    input_topic = next(t for t in required if t.startswith("orders-"))
    broker.create_topics({t: n for t, n in required.items() if t != input_topic})
    worker = Worker(
        broker, config, app_id=app_id, partitions=2, data_dir=tmp_path / "d",
        log_path=tmp_path / "w.log", namespace=topics.releases.rsplit(".", 1)[0],
    )  # fmt: skip
    assert _wait_exit(worker, 60) == EXIT_CONFIG, worker.log_tail()
    log = (tmp_path / "w.log").read_text(errors="replace")
    assert f"topic(s) {input_topic} do not exist" in log
    assert "Starting..." not in log  # Faust never started (it would have created the topic)
    worker.stop()


def test_a_ready_worker_stops_on_sigterm_within_its_deadline(
    broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    config, app_id, topics, _, scenario = _scenario_topics(broker, unique_name, tmp_path)
    create_topics(broker, scenario, config, 2, app_id=app_id, topics=topics)  # type: ignore[arg-type]
    worker = Worker(
        broker, config, app_id=app_id, partitions=2, data_dir=tmp_path / "d",
        log_path=tmp_path / "w.log", namespace=topics.releases.rsplit(".", 1)[0],
        extra_args=["--stop-deadline", "3"],
    )  # fmt: skip
    worker.wait_ready()
    produce(broker, lines_as_records(scenario, stop=20))  # type: ignore[arg-type]
    started = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)
    code = _wait_exit(worker, 15)
    took = time.monotonic() - started
    assert code == 0, worker.log_tail()
    assert took < 3 + 2, f"stopped after {took:.1f} s"
    worker.stop()


def test_sigterm_with_the_broker_unreachable_is_honoured_at_once(tmp_path: Path) -> None:
    port = free_loopback_port()  # nobody listens there
    log_path = tmp_path / "w.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "streamdp", "worker", "--config", str(SPEC),
                "--bootstrap", f"127.0.0.1:{port}", "--app-id", "unreachable",
                "--data-dir", str(tmp_path / "d"), "--web-port", str(free_loopback_port()),
                "--insecure-seed", "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "no Kafka broker answers" not in log_path.read_text(
            errors="replace"
        ):
            assert process.poll() is None, log_path.read_text(errors="replace")
            time.sleep(0.2)
        waiting = log_path.read_text(errors="replace")
        assert "no Kafka broker answers" in waiting
        assert "Unable connect" not in waiting  # one line, not aiokafka's error per attempt
        assert "Traceback" not in waiting
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(10)
        finally:
            if process.poll() is None:
                process.kill()
        took = time.monotonic() - started
    assert code in (0, -signal.SIGTERM)
    assert took < 5, f"stopped after {took:.1f} s"


# ---------------------------------------------------------------- start-up refusals (no broker)


def _start_refused(*extra: str) -> tuple[int, str]:
    """Run a worker pointed at a closed broker port; return its status and output (it must
    exit on its own, before waiting for the broker)."""
    closed = free_loopback_port()  # nobody listens there
    done = subprocess.run(
        [
            sys.executable, "-m", "streamdp", "worker", "--config", str(SPEC),
            "--bootstrap", f"127.0.0.1:{closed}", "--app-id", "refused",
            *extra,
        ],
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def test_an_invalid_log_level_exits_2_with_one_line_before_connecting(tmp_path: Path) -> None:
    code, output = _start_refused(
        "--data-dir", str(tmp_path / "d"), "--web-port", str(free_loopback_port()),
        "--log-level", "chatty",
    )  # fmt: skip
    assert code == 2, output
    assert output.splitlines() == [
        (
            "streamdp worker: error: --log-level / STREAMDP_LOG_LEVEL must be one of debug, "
            "info, warning, error, critical, got 'chatty'"
        )
    ]


def test_a_taken_web_port_exits_78_with_one_line_before_connecting(tmp_path: Path) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        code, output = _start_refused("--data-dir", str(tmp_path / "d"), "--web-port", str(port))
    assert code == EXIT_CONFIG, output
    assert output.splitlines() == [
        (
            f"fatal configuration problem, exit status 78: --web-port {port} is already in use "
            "on 127.0.0.1 (another worker or program listens there); stop it or give this "
            "worker another --web-port / STREAMDP_WEB_PORT"
        )
    ]
