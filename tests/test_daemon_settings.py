"""Worker settings: flags and STREAMDP_* variables are validated with actionable messages, and
secrets come from the environment only."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from streamdp.daemon.routing import OutputTopics
from streamdp.daemon.settings import DaemonSettings, env_settings
from streamdp.daemon.web_port import check_web_port
from streamdp.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[1] / "streamdp" / "examples" / "restaurant.toml"


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "streams.toml"
    path.write_text("# contents are checked by the engine, not here\n")
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bootstrap": "kafka"}, "HOST:PORT"),
        ({"partitions": 0}, "--partitions"),
        ({"web_port": 70000}, "--web-port"),
        ({"web_port": 0}, "Prometheus scrapes /metrics at a configured address"),
        ({"log_level": "chatty"}, "--log-level / STREAMDP_LOG_LEVEL must be one of debug,"),
        ({"max_batch": 0}, "--max-batch"),
        ({"batch_seconds": 0.0}, "--batch-seconds"),
        ({"fetch_wait_seconds": 0.0}, "--fetch-wait"),
        ({"fetch_wait_seconds": 60.0}, "--fetch-wait"),
        ({"tick_seconds": 0.0}, "--tick"),
        ({"session_timeout": 2.0}, "--session-timeout must be at least 3 seconds"),
        ({"session_timeout": float("nan")}, "--session-timeout"),
        ({"clock": "frozen:yesterday"}, "--clock"),
        ({"clock": "simulated:2024-01-01T00:00:00Z@1x0"}, "--clock"),
        ({"clock": "sundial"}, "--clock"),
        ({"delivery_allowance_seconds": -1.0}, "--delivery-allowance"),
        ({"delivery_allowance_seconds": float("nan")}, "--delivery-allowance"),
        ({"security_protocol": "TLS"}, "STREAMDP_SECURITY_PROTOCOL"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"}, "STREAMDP_SASL_PASSWORD"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "MD5"}, "STREAMDP_SASL_MECHANISM"),
        ({"security_protocol": "SASL_SSL"}, "with SASL_SSL, but it is not set$"),
        ({"bootstrap": "127.0.0.1:99999"}, "port 99999 is not a TCP port"),
        ({"insecure_seed": -1}, "--insecure-seed must be an integer >= 0, got -1"),
        ({"start_delay_seconds": -1.0}, "--start-delay must be >= 0"),
        ({"start_delay_seconds": float("nan")}, "--start-delay"),
        ({"start_delay_seconds": 601.0}, "--start-delay"),
        # an audit's crashes inside Faust or the lease (tracebacks, exit 1, not 2)
        ({"app_id": ""}, "--app-id / STREAMDP_APP_ID names the consumer group"),
        ({"app_id": "my app"}, "got 'my app'"),
        ({"standby_replicas": -3}, "--standby-replicas must be >= 0"),
        ({"session_timeout": float("inf")}, "--session-timeout must be a number of seconds"),
        ({"stall_exit_seconds": float("nan")}, "--stall-exit must be >= 0"),
        ({"stall_exit_seconds": float("inf")}, r"0: never exit on a stall\), got inf"),
    ],
)
def test_bad_settings_name_what_to_fix(spec: Path, change: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DaemonSettings(config=spec, **change).validate()  # type: ignore[arg-type]


def test_the_start_delay_is_read_from_the_environment_and_waited_before_joining(
    spec: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from streamdp.worker_cli import wait_before_joining

    values = env_settings(str(spec), {"STREAMDP_START_DELAY": "15"})
    assert DaemonSettings(**values).validate().start_delay_seconds == 15.0  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="STREAMDP_START_DELAY must be a number of seconds"):
        env_settings(str(spec), {"STREAMDP_START_DELAY": "15s"})
    slept: list[float] = []
    wait_before_joining(15.0, slept.append)
    wait_before_joining(0.0, slept.append)
    assert slept == [15.0]
    assert "waiting 15 s before joining the consumer group" in capsys.readouterr().err


def test_log_levels_are_taken_in_any_case(spec: Path) -> None:
    for level in ("debug", "INFO", "Warning", "error", "critical"):
        assert DaemonSettings(config=spec, log_level=level).validate().log_level == level


def test_a_taken_web_port_is_named_with_what_to_do() -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        with pytest.raises(ConfigError, match=f"--web-port {port} is already in use on 127.0.0.1"):
            check_web_port("127.0.0.1", port)
    check_web_port("127.0.0.1", port)  # free again once its listener closed


def test_a_port_left_in_time_wait_by_a_stopped_worker_is_free() -> None:
    """The server side of a connection it closed first stays in TIME_WAIT for a minute; Faust's
    server binds with SO_REUSEADDR and starts there, so the check must pass too."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's servers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        served, _ = listener.accept()
        served.close()  # the server closes first: its end goes to TIME_WAIT
        client.recv(1)
        client.close()
    check_web_port("127.0.0.1", port)


def test_an_address_that_is_not_this_machines_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"cannot listen on --web-host '192\.0\.2\.1' --web-port"):
        check_web_port("192.0.2.1", 6066)  # TEST-NET-1: never a local address


def test_missing_spec_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a readable file"):
        DaemonSettings(config=tmp_path / "nope.toml").validate()


def test_environment_fills_settings_and_keeps_the_password_out_of_repr(spec: Path) -> None:
    env = {
        "STREAMDP_CONFIG": str(spec),
        "STREAMDP_BOOTSTRAP": "127.0.0.1:9093",
        "STREAMDP_PARTITIONS": "6",
        "STREAMDP_TOPIC_NAMESPACE": "feeds",
        "STREAMDP_SECURITY_PROTOCOL": "SASL_SSL",
        "STREAMDP_SASL_MECHANISM": "SCRAM-SHA-512",
        "STREAMDP_SASL_USERNAME": "streamdp",
        "STREAMDP_SASL_PASSWORD": "s3cret-value",
        "STREAMDP_METRICS_INPUT_VOLUME": "false",
    }
    settings = DaemonSettings(**env_settings(None, env)).validate()  # type: ignore[arg-type]
    assert settings.bootstrap == "127.0.0.1:9093"
    assert settings.partitions == 6
    assert settings.topics == OutputTopics.in_namespace("feeds")
    assert settings.metrics_input_volume is False
    assert "s3cret-value" not in repr(settings)
    with pytest.raises(ConfigError, match="STREAMDP_PARTITIONS must be an integer"):
        env_settings(None, {**env, "STREAMDP_PARTITIONS": "many"})
    with pytest.raises(ConfigError, match="--config SPEC or set STREAMDP_CONFIG"):
        env_settings(None, {})


def test_the_faust_app_module_builds_the_worker_from_the_environment(tmp_path: Path) -> None:
    """``faust -A streamdp.daemon.faust_app worker`` works: the module builds the app from
    STREAMDP_* variables (in a subprocess: the module reads them at import)."""
    import os
    import subprocess
    import sys
    from importlib import resources

    spec = resources.files("streamdp").joinpath("examples", "restaurant.toml")
    code = (
        "from streamdp.daemon import faust_app as m; import faust; "
        "assert isinstance(m.app, faust.App); "
        "import gc; "
        "print(m.app.conf.id, sorted(m.runtime.spec.streams), m.runtime.sampler.secure, "
        "gc.get_threshold()[0], gc.get_freeze_count() > 0)"
    )
    env = {
        **os.environ,
        "STREAMDP_CONFIG": str(spec),
        "STREAMDP_APP_ID": "feeds",
        "STREAMDP_DATA_DIR": str(tmp_path),
    }
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    # and the worker process's garbage collector is tuned as `streamdp worker` tunes it
    assert out.split() == ["feeds", "['restaurant-items']", "True", "50000", "True"]


def test_input_volume_metrics_are_off_unless_an_operator_turns_them_on(spec: Path) -> None:
    """Records read, rejected and lag reveal input volume: /metrics carries none by default."""
    import argparse

    from streamdp.worker_cli import register, settings_from_args

    assert DaemonSettings(config=spec).metrics_input_volume is False
    assert env_settings(str(spec), {"STREAMDP_METRICS_INPUT_VOLUME": "1"})["metrics_input_volume"]
    parser = argparse.ArgumentParser()
    register(parser)
    default = settings_from_args(parser.parse_args(["--config", str(spec)]))
    assert default.metrics_input_volume is False
    assert default.clock == "wall"
    on = settings_from_args(parser.parse_args(["--config", str(spec), "--input-volume-metrics"]))
    assert on.metrics_input_volume is True


@pytest.mark.parametrize(
    ("value", "on"),
    [
        ("true", True),
        ("1", True),
        ("YES", True),
        ("On", True),
        ("false", False),
        ("0", False),
        ("No", False),
        ("off", False),
        ("OFF", False),
    ],
)
def test_the_input_volume_variable_reads_on_and_off_words(spec: Path, value: str, on: bool) -> None:
    assert (
        env_settings(str(spec), {"STREAMDP_METRICS_INPUT_VOLUME": value})["metrics_input_volume"]
        is on
    )


@pytest.mark.parametrize("value", ["disabled", "none", "n", "f", "offf", "2"])
def test_the_input_volume_variable_refuses_other_words(spec: Path, value: str) -> None:
    """Input-volume metrics make /metrics, /status and the logs protected surfaces. Any value
    but 0, false and no turned them on, so an operator who wrote ``off`` or ``disabled`` to
    keep them public got record counts and lag on them; now such a value is refused."""
    with pytest.raises(ConfigError, match="STREAMDP_METRICS_INPUT_VOLUME must be one of"):
        env_settings(str(spec), {"STREAMDP_METRICS_INPUT_VOLUME": value})


def test_public_clocks_parse_and_never_read_the_data() -> None:
    from streamdp.engine.clock import PublicClock, parse_clock

    wall = [1_700_000_000.0]
    frozen = parse_clock("frozen:2024-01-01T00:00:00Z")
    assert frozen.now() == 1704067200.0
    simulated = parse_clock("simulated:2024-01-01T00:00:00Z@1700000000.0x86400")
    ticking = PublicClock(simulated.origin, simulated.anchor, simulated.rate, lambda: wall[0])
    assert ticking.now() == 1704067200.0
    wall[0] += 1.5  # a second and a half of wall clock is a day and a half of simulated time
    assert ticking.now() == 1704067200.0 + 1.5 * 86400
    assert parse_clock("wall").describe() == "wall"
    assert parse_clock(frozen.describe()) == frozen


@pytest.mark.parametrize(
    "variable",
    [
        "APP_WEB_TABLES_ENABLED",
        "APP_WEB_ROUTER_ENABLED",
        "APP_WEB_STATS_ENABLED",
        "APP_WEB_GRAPH_ENABLED",
        "APP_WEB_METRICS_ENABLED",
        "APP_DEBUG",
    ],
)
def test_the_worker_refuses_an_environment_that_turns_on_fausts_web_views(
    variable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Faust's APP_* variables override what the worker passes: with one of them on, its
    views (tables of raw partial sums at /table, lag at /performance, statistics) would share
    the worker's port with /metrics and /status. The worker refuses to start instead."""
    from streamdp.daemon.app import create_app

    monkeypatch.setenv(variable, "true")
    with pytest.raises(ConfigError, match=variable):
        create_app(DaemonSettings(config=EXAMPLE, data_dir=tmp_path))


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CONSUMER_GROUP_INSTANCE_ID", "worker-0"),
        ("BROKER_SESSION_TIMEOUT", "6"),
        ("BROKER_REBALANCE_TIMEOUT", "12"),
        ("BROKER_HEARTBEAT_INTERVAL", "3"),
    ],
)
def test_the_worker_refuses_an_environment_that_voids_its_membership_lease(
    variable: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Faust reads these variables over what the worker passes. The membership lease counts
    with the worker's own session and rebalance timeouts: a shorter one from the environment
    lets the group expel the worker while the lease still lets it write. Static membership
    lets a second process with the same instance id take the partitions over at once (no
    session timeout at all). The worker refuses to start instead."""
    from streamdp.daemon.app import create_app

    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=variable):
        create_app(DaemonSettings(config=EXAMPLE, data_dir=tmp_path))


def test_the_worker_serves_none_of_fausts_views(tmp_path: Path) -> None:
    from streamdp.daemon.app import create_app

    app, _ = create_app(DaemonSettings(config=EXAMPLE, data_dir=tmp_path))
    mounted = [str(blueprint) for _, blueprint in app.web._enabled_blueprints()]
    assert all("production_index" in b or "index" in b for b in mounted), mounted


@pytest.mark.parametrize("namespace", ["../x", "a b", "-lead", "x" * 202, "ns/releases"])
def test_a_namespace_that_makes_no_topic_names_is_refused_however_given(
    spec: Path, namespace: str
) -> None:
    """The worker took any namespace and failed later at the broker (review); the feed alone
    checked it. Now the flag and the variable are checked alike, with the value named."""
    from streamdp.cli import build_parser
    from streamdp.worker_cli import settings_from_args

    with pytest.raises(ConfigError, match="STREAMDP_TOPIC_NAMESPACE must be a topic name"):
        env_settings(str(spec), {"STREAMDP_TOPIC_NAMESPACE": namespace})
    args = build_parser().parse_args(
        ["worker", "--config", str(spec), f"--topic-namespace={namespace}"]
    )
    with pytest.raises(
        ConfigError, match=f"--topic-namespace must be .* got {re.escape(repr(namespace))}"
    ):
        settings_from_args(args)
    assert env_settings(str(spec), {"STREAMDP_TOPIC_NAMESPACE": "feeds.v2"})
