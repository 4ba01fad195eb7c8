"""Worker settings: from command-line flags, falling back to ``STREAMDP_*`` environment variables.

Secrets (the SASL password) are read from the environment only, never from a flag, so they do not
show in process listings.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from streamdp.bootstrap_address import check_bootstrap
from streamdp.daemon.checkpoint import MAX_NOISE_CHUNK_BYTES
from streamdp.daemon.checkpoint_writer import MAX_SEEN_CHUNK_BYTES
from streamdp.daemon.routing import OutputTopics
from streamdp.daemon.state_chunks import HOT_INLINE_BYTES, MAX_HOT_PIECE_BYTES, MAX_NODE_PART_BYTES
from streamdp.engine.clock import parse_clock
from streamdp.engine.dead_letter_bounds import MAX_DEAD_LETTER_BYTES
from streamdp.errors import ConfigError
from streamdp.noise.insecure import check_insecure_seed
from streamdp.topic_namespace import check_namespace

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PRODUCER_ACKS = ("all", "1", "0")
#: ``--log-level`` values (in any case): Python's level names, which Faust's worker takes
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
#: Bytes a Kafka record batch adds around one record's key and value (header 61, record ~20).
RECORD_OVERHEAD_BYTES = 1024
#: The largest single record each kind of write can make, bytes of key + value; every one must
#: fit the producer's request limit (checked by :meth:`DaemonSettings.validate`). None grows
#: with a stream's counters: what does is cut into records of these sizes
#: (:mod:`streamdp.daemon.state_chunks`, :func:`streamdp.daemon.checkpoint.noise_chunks`).
WRITE_BOUNDS: dict[str, int] = {
    "dead letter": MAX_DEAD_LETTER_BYTES,
    "content-key chunk of the state table": MAX_SEEN_CHUNK_BYTES,
    "hot state stored whole": HOT_INLINE_BYTES,
    "piece of a hot state": MAX_HOT_PIECE_BYTES,
    "noisy node or part of one": MAX_NODE_PART_BYTES,
    "chunk of a k-ary epoch's noise": MAX_NOISE_CHUNK_BYTES,
}


#: Wall seconds a worker waits after a period's close instant before releasing it, so that
#: records sent before the close (by their Kafka timestamp) and still in flight, or queued
#: behind a burst, are in; a record received later than that is late.
DEFAULT_DELIVERY_ALLOWANCE = 5.0
MAX_DELIVERY_ALLOWANCE = 86_400.0
MAX_START_DELAY = 600.0


#: A worker's app id: the consumer group and the state topics' prefix (Kafka's topic
#: characters; short enough that the longest state topic name stays within Kafka's 249).
_APP_ID = re.compile(r"[A-Za-z0-9._-]{1,150}\Z")


def check_app_id(app_id: str, given_as: str = "--app-id / STREAMDP_APP_ID") -> str:
    """``app_id`` if a worker can take it, else :class:`ConfigError` naming how it was
    ``given_as`` and the value."""
    if not _APP_ID.match(app_id):
        raise ConfigError(
            f"{given_as} names the consumer group and prefixes the state topics, so it must be "
            f"1-150 letters, digits, '.', '_' or '-', got {app_id!r}"
        )
    return app_id


@dataclass(frozen=True)
class DaemonSettings:
    """Everything a worker needs besides the stream specification itself."""

    config: Path
    bootstrap: str = "127.0.0.1:9092"
    app_id: str = "streamdp"
    partitions: int = 12
    web_host: str = "127.0.0.1"
    web_port: int = 6066
    data_dir: Path = Path(".streamdp-data")
    standby_replicas: int = 0
    insecure_seed: int | None = None
    # the public clock that closes periods (streamdp.engine.clock): "wall" in production
    clock: str = "wall"
    # how often every owned source is advanced to the clock (closes periods with no input)
    tick_seconds: float = 0.5
    # wall seconds between a period's close instant and its release: records judged at their
    # own Kafka timestamps, sent before the close, have this long to be received
    delivery_allowance_seconds: float = DEFAULT_DELIVERY_ALLOWANCE
    session_timeout: float = 10.0
    heartbeat_interval: float = 1.0
    commit_interval: float = 1.0
    max_batch: int = 5000
    batch_seconds: float = 0.2
    # Tansu (the embedded broker) answers ListOffsets with the base offset of the last record
    # batch + 1; one record per produce batch keeps changelog recovery exact on it.
    single_record_batches: bool = False
    # the producer's request limit (Kafka's max.request.size; brokers default to about the
    # same message.max.bytes): every write the worker makes is bounded below it
    max_request_size: int = 1_000_000
    # a jump in input offsets means records were skipped below the worker (a Faust 0.15 issue
    # around rebalances): the worker exits and restarts from its checkpoint, unless holes are
    # legitimate on the input topics (records removed by retention before they were read; a
    # transaction's markers are accepted without it, see streamdp.daemon.skipped_offsets)
    allow_input_gaps: bool = False
    # input records available on an assigned partition but none delivered for this long (the
    # same Faust issue can drop a whole fetch): exit and restart from the checkpoint; 0 = off
    stall_exit_seconds: float = 60.0
    # wall seconds a worker waits, its configuration checked, before joining the consumer group:
    # a supervisor's quick restart would otherwise rejoin before the group expelled the crashed
    # predecessor (docs/operating.md section 4)
    start_delay_seconds: float = 0.0
    # "batch": records reach the service per fetch, through streamdp.daemon.batch_input;
    # "stream": through a Faust agent, one event at a time (same checkpoint protocol, slower)
    input_path: str = "batch"
    # the consumer's fetch long-poll (Faust fixes 1.5 s; see streamdp.faust_internals)
    fetch_wait_seconds: float = 0.1
    # acknowledgements the worker's producer waits for: "all" (every in-sync replica; with
    # min.insync.replicas=2 a write survives the loss of its leader), "1" (leader only) or "0"
    producer_acks: str = "all"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    # input-volume metrics (records read, rejected by reason, dropped by a privacy unit's
    # bounds, consumer lag, and two timings that grow with them) reveal how many records
    # arrived: off by default so that /metrics carries nothing derived from raw data
    metrics_input_volume: bool = False
    log_level: str = "info"
    # the file holding the secret key privacy-unit identifiers are hashed under (needed when
    # a stream declares a privacy_unit; the same key on every restart)
    unit_key_file: Path | None = None
    topics: OutputTopics = field(default_factory=OutputTopics)

    @property
    def rebalance_timeout(self) -> float:
        """Seconds the group coordinator waits for members to rejoin in a rebalance."""
        return max(10.0, 2 * self.session_timeout)

    def validate(self) -> DaemonSettings:
        """Raise :class:`ConfigError` naming the setting that is wrong."""
        if not self.config.is_file():
            raise ConfigError(f"--config {str(self.config)!r} is not a readable file")
        check_bootstrap(self.bootstrap, "--bootstrap / STREAMDP_BOOTSTRAP")
        check_app_id(self.app_id)
        if self.standby_replicas < 0:
            raise ConfigError(
                f"--standby-replicas must be >= 0 (0: no standby copies of the tables), got "
                f"{self.standby_replicas}"
            )
        if self.partitions < 1:
            raise ConfigError(f"--partitions must be >= 1, got {self.partitions}")
        check_insecure_seed(self.insecure_seed)
        if self.web_port == 0:
            raise ConfigError(
                "--web-port must be a fixed TCP port (1-65535), got 0: a worker does not pick a "
                "free port, because Prometheus scrapes /metrics at a configured address; pass that "
                "port"
            )
        if not 0 < self.web_port < 65536:
            raise ConfigError(f"--web-port must be a TCP port (1-65535), got {self.web_port}")
        if self.log_level.lower() not in LOG_LEVELS:
            raise ConfigError(
                f"--log-level / STREAMDP_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got "
                f"{self.log_level!r}"
            )
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"STREAMDP_SECURITY_PROTOCOL {self.security_protocol!r} is not one of "
                f"{', '.join(SECURITY_PROTOCOLS)}"
            )
        if self.security_protocol.startswith("SASL"):
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise ConfigError(
                    f"STREAMDP_SASL_MECHANISM must be one of {', '.join(SASL_MECHANISMS)} with "
                    f"{self.security_protocol}, "
                    + (
                        "but it is not set"
                        if self.sasl_mechanism is None
                        else f"got {self.sasl_mechanism!r}"
                    )
                )
            if not self.sasl_username or not self.sasl_password:
                raise ConfigError(
                    "SASL needs STREAMDP_SASL_USERNAME and STREAMDP_SASL_PASSWORD "
                    "in the environment"
                )
        if not math.isfinite(self.session_timeout):
            raise ConfigError(
                f"--session-timeout must be a number of seconds, got {self.session_timeout}"
            )
        if not self.session_timeout >= 3 * self.heartbeat_interval:
            raise ConfigError(
                f"--session-timeout must be at least {3 * self.heartbeat_interval:g} seconds "
                f"(three heartbeats of {self.heartbeat_interval:g} s), got {self.session_timeout}"
            )
        if self.max_batch < 1:
            raise ConfigError(f"--max-batch must be >= 1 record, got {self.max_batch}")
        if not self.batch_seconds > 0:
            raise ConfigError(f"--batch-seconds must be > 0, got {self.batch_seconds}")
        if not 0 < self.fetch_wait_seconds <= 30:
            raise ConfigError(
                f"--fetch-wait must be > 0 and <= 30 seconds, got {self.fetch_wait_seconds}"
            )
        if self.producer_acks not in PRODUCER_ACKS:
            raise ConfigError(
                f"STREAMDP_PRODUCER_ACKS must be one of {', '.join(PRODUCER_ACKS)}, got "
                f"{self.producer_acks!r}"
            )
        if self.input_path not in ("stream", "batch"):
            raise ConfigError(f"--input-path must be stream or batch, got {self.input_path!r}")
        if not 0 <= self.stall_exit_seconds < math.inf:
            raise ConfigError(
                f"--stall-exit must be >= 0 seconds (0: never exit on a stall), got "
                f"{self.stall_exit_seconds}"
            )
        if not 0 <= self.start_delay_seconds <= MAX_START_DELAY:
            raise ConfigError(
                f"--start-delay must be >= 0 and <= {MAX_START_DELAY:g} seconds, got "
                f"{self.start_delay_seconds}"
            )
        if not 0 <= self.delivery_allowance_seconds <= MAX_DELIVERY_ALLOWANCE:
            raise ConfigError(
                f"--delivery-allowance must be >= 0 and <= {MAX_DELIVERY_ALLOWANCE:g} seconds, "
                f"got {self.delivery_allowance_seconds}"
            )
        if not 0 < self.tick_seconds <= 60:
            raise ConfigError(f"--tick must be > 0 and <= 60 seconds, got {self.tick_seconds}")
        parse_clock(self.clock)
        needed = max(WRITE_BOUNDS.values()) + RECORD_OVERHEAD_BYTES
        if self.max_request_size < needed:
            largest = max(WRITE_BOUNDS, key=lambda kind: WRITE_BOUNDS[kind])
            raise ConfigError(
                f"STREAMDP_MAX_REQUEST_SIZE must be at least {needed} bytes (a {largest} can "
                f"take {WRITE_BOUNDS[largest]} bytes), got {self.max_request_size}"
            )
        return self


def env_settings(config: str | None, env: Mapping[str, str] | None = None) -> dict[str, object]:
    """Settings found in the environment (``STREAMDP_*``), as keyword arguments."""
    e = os.environ if env is None else env
    out: dict[str, object] = {}
    path = config or e.get("STREAMDP_CONFIG")
    if not path:
        raise ConfigError("no stream specification: pass --config SPEC or set STREAMDP_CONFIG")
    out["config"] = Path(path)
    text_keys = {
        "STREAMDP_BOOTSTRAP": "bootstrap",
        "STREAMDP_APP_ID": "app_id",
        "STREAMDP_WEB_HOST": "web_host",
        "STREAMDP_SECURITY_PROTOCOL": "security_protocol",
        "STREAMDP_SASL_MECHANISM": "sasl_mechanism",
        "STREAMDP_SASL_USERNAME": "sasl_username",
        "STREAMDP_SASL_PASSWORD": "sasl_password",
        "STREAMDP_SSL_CAFILE": "ssl_cafile",
        "STREAMDP_SSL_CERTFILE": "ssl_certfile",
        "STREAMDP_SSL_KEYFILE": "ssl_keyfile",
        "STREAMDP_LOG_LEVEL": "log_level",
        "STREAMDP_PRODUCER_ACKS": "producer_acks",
        "STREAMDP_CLOCK": "clock",
    }
    for name, key in text_keys.items():
        if e.get(name):
            out[key] = e[name]
    int_keys = {
        "STREAMDP_WEB_PORT": "web_port",
        "STREAMDP_PARTITIONS": "partitions",
        "STREAMDP_STANDBY_REPLICAS": "standby_replicas",
        "STREAMDP_MAX_REQUEST_SIZE": "max_request_size",
    }
    for name, key in int_keys.items():
        if e.get(name):
            try:
                out[key] = int(e[name])
            except ValueError:
                raise ConfigError(f"{name} must be an integer, got {e[name]!r}") from None
    delay = e.get("STREAMDP_START_DELAY")
    if delay:
        try:
            out["start_delay_seconds"] = float(delay)
        except ValueError:
            raise ConfigError(
                f"STREAMDP_START_DELAY must be a number of seconds, got {delay!r}"
            ) from None
    if e.get("STREAMDP_TOPIC_NAMESPACE"):
        out["topics"] = OutputTopics.in_namespace(
            check_namespace(e["STREAMDP_TOPIC_NAMESPACE"], "STREAMDP_TOPIC_NAMESPACE")
        )
    if e.get("STREAMDP_UNIT_KEY_FILE"):
        out["unit_key_file"] = Path(e["STREAMDP_UNIT_KEY_FILE"])
    if e.get("STREAMDP_DATA_DIR"):
        out["data_dir"] = Path(e["STREAMDP_DATA_DIR"])
    if e.get("STREAMDP_METRICS_INPUT_VOLUME"):
        out["metrics_input_volume"] = _switch(
            "STREAMDP_METRICS_INPUT_VOLUME", e["STREAMDP_METRICS_INPUT_VOLUME"]
        )
    return out


#: Words a switch variable takes (in any case): on, and off.
SWITCH_ON = ("true", "1", "yes", "on")
SWITCH_OFF = ("false", "0", "no", "off")


def _switch(name: str, value: str) -> bool:
    """``value`` of the switch variable ``name`` read as on or off; any other word is refused
    (read as on, ``off`` or ``disabled`` turned the input-volume metrics on and made a surface
    the operator meant to keep public a protected one)."""
    word = value.strip().lower()
    if word in SWITCH_ON:
        return True
    if word in SWITCH_OFF:
        return False
    raise ConfigError(
        f"{name} must be one of {', '.join(SWITCH_ON)} (on) or {', '.join(SWITCH_OFF)} (off), "
        f"in any case; got {value!r}"
    )
