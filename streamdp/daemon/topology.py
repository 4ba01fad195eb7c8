"""The topics a worker reads and writes, and how it connects to the brokers."""

from __future__ import annotations

from typing import Any

import faust

from streamdp.daemon.settings import DaemonSettings
from streamdp.engine import EngineSpec

#: name of the worker's state table (its changelog topic is ``<app id>-state-changelog``)
STATE_TABLE = "state"


def required_topics(spec: EngineSpec, settings: DaemonSettings) -> dict[str, int]:
    """Every topic the worker reads or writes, with its partition count (create them first).

    Input topics, the control topic and the state changelog are co-partitioned (same count).
    """
    n = settings.partitions
    topics = {source.topic: n for source in spec.sources.values()}
    topics[settings.topics.control] = n
    topics[f"{settings.app_id}-{STATE_TABLE}-changelog"] = n
    topics[settings.topics.releases] = n
    topics[settings.topics.consistent] = n
    topics[settings.topics.dead_letter] = n
    return topics


def input_topics(spec: EngineSpec) -> list[str]:
    """The topics the worker reads events from, one per source, in the spec's order."""
    return [source.topic for source in spec.sources.values()]


def broker_credentials(settings: DaemonSettings) -> Any:
    """Faust credentials for the configured security protocol (None for PLAINTEXT)."""
    if settings.security_protocol == "PLAINTEXT":
        return None
    import ssl

    context = None
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=settings.ssl_cafile)
        if settings.ssl_certfile:
            context.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile)
    if settings.security_protocol.startswith("SASL"):
        if settings.sasl_mechanism == "PLAIN":
            return faust.SASLCredentials(
                username=settings.sasl_username,
                password=settings.sasl_password,
                ssl_context=context,
            )
        from faust.auth import SASLCredentials as _Sasl

        return _Sasl(
            username=settings.sasl_username,
            password=settings.sasl_password,
            mechanism=settings.sasl_mechanism,
            ssl_context=context,
        )
    return faust.SSLCredentials(context)
