"""Where Apache Kafka's runtime comes from: a Java executable and the jars, resolved with Maven.

``streamdp/broker/kafka_jars/pom.xml`` names ``org.apache.kafka:kafka_2.13``
(:data:`KAFKA_VERSION`) and a log binding; :func:`kafka_libs` copies them with their runtime
dependencies into a cache directory once (``mvn dependency:copy-dependencies``), then reuses it.
:func:`kafka_available` says why Kafka cannot run here, for a loud test skip.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.resources
import os
import shutil
import subprocess
from pathlib import Path

from streamdp.broker.loopback import log_tail
from streamdp.errors import BrokerError

#: The Apache Kafka release the tests, the benchmarks and deploy/ use.
KAFKA_VERSION = "4.4.0"


class KafkaUnavailableError(BrokerError):
    """Apache Kafka cannot run here: Java or Maven is missing, or the jars do not resolve."""


def java_executable() -> str:
    """The ``java`` to run Kafka with: ``$JAVA_HOME/bin/java`` if set, else ``java`` on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaUnavailableError(
            "Apache Kafka needs a Java runtime (17 or newer) and none was found: no `java` on "
            "PATH and no JAVA_HOME. Install one (Debian/Ubuntu: `apt-get install "
            "openjdk-17-jre-headless`) or run the broker tests on Tansu"
        )
    return found


def _pom() -> Path:
    return Path(str(importlib.resources.files("streamdp.broker").joinpath("kafka_jars/pom.xml")))


def default_cache_dir() -> Path:
    """Where the jars go: ``$KAFKA_JAR_CACHE``, else ``.cache/kafka-<version>`` in a source
    checkout (next to ``pyproject.toml``), else ``~/.cache/streamdp/kafka-<version>``."""
    override = os.environ.get("KAFKA_JAR_CACHE")
    if override:
        return Path(override)
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "streamdp").is_dir():
        return checkout / ".cache" / f"kafka-{KAFKA_VERSION}"
    return Path.home() / ".cache" / "streamdp" / f"kafka-{KAFKA_VERSION}"


def kafka_libs(cache_dir: Path | None = None) -> Path:
    """The directory holding Kafka's jars, resolved with Maven on first use.

    A stamp file records the hash of the pom the jars came from, so a changed pom resolves
    again. Concurrent callers (two test sessions, a benchmark) wait on a file lock instead of
    resolving twice. Raises :class:`KafkaUnavailableError` when Maven is missing or fails.
    """
    cache = cache_dir if cache_dir is not None else default_cache_dir()
    libs = cache / "libs"
    pom = _pom()
    want = hashlib.sha256(pom.read_bytes()).hexdigest()
    stamp = cache / "resolved.sha256"
    if stamp.is_file() and stamp.read_text().strip() == want:
        return libs
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text().strip() == want:
            return libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise KafkaUnavailableError(
                f"Apache Kafka {KAFKA_VERSION}'s jars are not in {libs} and resolving them needs "
                "Maven, which is not on PATH. Install it (Debian/Ubuntu: `apt-get install maven`) "
                "or point KAFKA_JAR_CACHE at a directory whose libs/ holds the jars"
            )
        shutil.rmtree(libs, ignore_errors=True)
        log = cache / "mvn.log"
        command = [
            mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
            f"-DoutputDirectory={libs}", "-DincludeScope=runtime",
        ]  # fmt: skip
        with log.open("wb") as out:
            done = subprocess.run(  # noqa: S603 - fixed argv
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if done.returncode != 0 or not any(libs.glob(f"kafka_2.13-{KAFKA_VERSION}.jar")):
            raise KafkaUnavailableError(
                f"Maven could not resolve Apache Kafka {KAFKA_VERSION} from {pom} (exit "
                f"{done.returncode}); {log} ends with:\n{log_tail(log)}"
            )
        stamp.write_text(want + "\n")
    return libs


def kafka_available() -> str | None:
    """``None`` when Apache Kafka can run here, else why not (for a loud test skip)."""
    try:
        java_executable()
        kafka_libs()
    except KafkaUnavailableError as error:
        return str(error)
    return None
