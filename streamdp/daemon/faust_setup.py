"""The Faust app of one worker and what it declares: input topics, output topics, state table.

Faust's settings come from the daemon's (:class:`~streamdp.daemon.settings.DaemonSettings`);
topics are never declared by the worker (``topic_allow_declare=False``: the operator or the
demo creates them), and Faust's web routes other than the worker's two pages are off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import faust
from faust.types import TableT, TopicT

from streamdp.daemon.settings import DaemonSettings
from streamdp.daemon.topology import STATE_TABLE, broker_credentials
from streamdp.errors import ConfigError

__all__ = [
    "FAUST_WEB_VIEWS",
    "WorkerTopics",
    "check_group_membership",
    "declare_topics",
    "new_faust_app",
]


#: Faust's own web views and the settings that turn them on: tables (raw open-period counts),
#: the router, statistics and assignment, the graph, and the performance metrics (throughput
#: and consumer lag). Faust lets ``APP_*`` environment variables override what the app passes,
#: so the worker checks what took effect.
FAUST_WEB_VIEWS = (
    "debug", "web_tables_enabled", "web_router_enabled", "web_stats_enabled",
    "web_graph_enabled", "web_metrics_enabled",
)  # fmt: skip


def new_faust_app(settings: DaemonSettings) -> faust.App:
    """A Faust app configured from ``settings`` (not started); :class:`ConfigError` when the
    environment turns on one of Faust's web views (:data:`FAUST_WEB_VIEWS`), which would serve
    protected state on the worker's port beside ``/metrics`` and ``/status``."""
    app = _faust_app(settings)
    enabled = [name for name in FAUST_WEB_VIEWS if getattr(app.conf, name)]
    if enabled:
        variables = ", ".join(f"APP_{name.upper()}" for name in enabled)
        raise ConfigError(
            f"the environment turns on Faust's {', '.join(enabled)} ({variables}): those views "
            "would serve raw state or input volumes on the worker's port; unset them (the "
            "worker serves /metrics and /status only)"
        )
    check_group_membership(app, settings)
    return app


#: Faust's group settings the membership lease is computed from (heartbeats renew it), each
#: with the worker's own setting and the environment variable through which Faust would
#: override what the worker passes
LEASE_GROUP_SETTINGS = (
    ("broker_session_timeout", "session_timeout", "BROKER_SESSION_TIMEOUT"),
    ("broker_rebalance_timeout", "rebalance_timeout", "BROKER_REBALANCE_TIMEOUT"),
    ("broker_heartbeat_interval", "heartbeat_interval", "BROKER_HEARTBEAT_INTERVAL"),
)


def check_group_membership(app: faust.App, settings: DaemonSettings) -> None:
    """:class:`ConfigError` when what took effect in Faust's settings would void the membership
    lease (:mod:`streamdp.daemon.membership_lease`): static membership
    (``CONSUMER_GROUP_INSTANCE_ID``: a second process with the same instance id takes the
    member's partitions over at once, with no session timeout to wait for), or a session or
    rebalance timeout or heartbeat interval other than the worker's (Faust reads
    ``BROKER_SESSION_TIMEOUT`` and the like from the environment over what the worker passes,
    while the lease counts with the worker's own)."""
    instance = app.conf.consumer_group_instance_id
    if instance:
        raise ConfigError(
            f"the environment sets CONSUMER_GROUP_INSTANCE_ID ({instance!r}): with static group "
            "membership a second process with that instance id takes this worker's partitions "
            "over at once, without the session timeout the worker's membership lease counts "
            "on, and both could publish a release with different noise; unset it"
        )
    for faust_name, name, variable in LEASE_GROUP_SETTINGS:
        took_effect = float(getattr(app.conf, faust_name))
        wanted = float(getattr(settings, name))
        if took_effect != wanted:
            raise ConfigError(
                f"the environment sets {variable} ({took_effect:g} s where the worker passes "
                f"{wanted:g} s): the worker's membership lease counts with its own value, so "
                f"the group could expel it while the lease still lets it write; unset "
                f"{variable} (the group timeouts follow --session-timeout)"
            )


def _faust_app(settings: DaemonSettings) -> faust.App:
    return faust.App(
        settings.app_id,
        broker=[f"kafka://{b.strip()}" for b in settings.bootstrap.split(",")],
        broker_credentials=broker_credentials(settings),
        store="memory://",
        processing_guarantee="at_least_once",
        topic_allow_declare=False,
        topic_disable_leader=True,
        topic_partitions=settings.partitions,
        table_standby_replicas=settings.standby_replicas,
        broker_session_timeout=settings.session_timeout,
        broker_heartbeat_interval=settings.heartbeat_interval,
        broker_rebalance_timeout=settings.rebalance_timeout,
        broker_commit_interval=settings.commit_interval,
        consumer_auto_offset_reset="earliest",
        producer_max_batch_size=1 if settings.single_record_batches else 16384,
        producer_acks=-1 if settings.producer_acks == "all" else int(settings.producer_acks),
        # every write is bounded below this by construction (settings.WRITE_BOUNDS)
        producer_max_request_size=settings.max_request_size,
        # the batch input path acknowledges after its checkpoint; records of a revoked
        # partition it drops are never acknowledged, so Faust must not wait for them
        stream_wait_empty=settings.input_path != "batch",
        web_enabled=True,
        # Faust's own views would serve table contents (raw partial sums), input volumes and
        # lag over HTTP: only /metrics and /status are served (new_faust_app checks the env)
        debug=False,
        web_tables_enabled=False,
        web_router_enabled=False,
        web_stats_enabled=False,
        web_graph_enabled=False,
        web_metrics_enabled=False,
        web_bind=settings.web_host,
        web_host=settings.web_host,
        web_port=settings.web_port,
        datadir=str(settings.data_dir),
        version=1,
    )


@dataclass(frozen=True)
class WorkerTopics:
    """The inputs (raw bytes), the outputs by name (text) and the state table of a worker."""

    inputs: TopicT
    outputs: dict[str, TopicT]
    state: TableT[Any, Any]


def declare_topics(
    app: faust.App, settings: DaemonSettings, input_names: Sequence[str]
) -> WorkerTopics:
    """Declare the worker's topics and its state table on ``app``."""
    inputs = app.topic(
        *input_names,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=settings.partitions,
        # commits of input partitions take the offsets the release service made durable
        # (faust_internals.acknowledged_commits); Faust's per-record acknowledgements, and
        # the gaps its drain loop infers from them, would only grow and mislead
        acks=False,
    )
    outputs = {
        name: app.topic(
            name, key_type=str, value_type=str, key_serializer="raw", value_serializer="raw"
        )
        for name in (
            settings.topics.releases,
            settings.topics.consistent,
            settings.topics.dead_letter,
        )
    }
    state = app.Table(
        STATE_TABLE,
        default=None,
        partitions=settings.partitions,
        schema=faust.Schema(key_serializer="json", value_serializer="json"),
    )
    return WorkerTopics(inputs, outputs, state)
