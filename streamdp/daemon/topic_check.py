"""Topics before start: every topic the worker uses exists, co-partitioned ones alike.

Asked of the broker (one metadata request, which creates no topic) before Faust subscribes, so a
broker that creates topics on demand never creates a missing one with its default partition
count. While no broker answers, the check waits and says so every 30 s.

Then the input topics' timestamp type: a topic set to ``LogAppendTime`` is warned about here,
from its configuration, once at start (public: it names the topic only). Warning when the
first such record arrived, as the worker used to, told anyone reading the logs that a record
had arrived, and when (audit of 2026-11-28).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from streamdp.daemon.settings import DaemonSettings
from streamdp.errors import EXIT_CONFIG, ConfigError

#: The topic configuration that says who stamps a record: its producer or the broker.
TIMESTAMP_TYPE = "message.timestamp.type"


def check_topics(
    settings: DaemonSettings, required: dict[str, int], inputs: Sequence[str] = ()
) -> None:
    """:func:`verify_topics` before Faust starts (on a loop of its own)."""
    loop = asyncio.new_event_loop()  # leaves the thread's current loop alone for Faust
    try:
        loop.run_until_complete(verify_topics(settings, required, inputs))
    finally:
        loop.close()


async def verify_topics(
    settings: DaemonSettings,
    required: dict[str, int],
    inputs: Sequence[str] = (),
    *,
    retry_seconds: float = 2.0,
) -> None:
    """Raise :class:`ConfigError` unless every topic the worker uses exists, with the configured
    partition count for the co-partitioned ones (inputs, control, state changelog). Asked before
    Faust subscribes (a broker that creates topics on demand would otherwise create a missing
    one with its default partition count). Waits while the broker cannot be reached, saying so
    every 30 s; a stop signal ends the wait at once."""
    warned = -30.0
    # aiokafka logs every failed connection attempt as an error: while waiting for a broker,
    # the one line below (every 30 s) says it instead
    quiet = logging.getLogger("aiokafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        existing = await _wait_for_topics(settings, retry_seconds, warned)
    finally:
        quiet.setLevel(level)
    missing = sorted(t for t in required if t not in existing)

    if missing:
        raise ConfigError(
            f"topic(s) {', '.join(missing)} do not exist on {settings.bootstrap}; create every "
            "topic the worker uses before starting it (streamdp.daemon.topology.required_topics; "
            "docs/operating.md)"
        )
    co_partitioned = _co_partitioned(settings, required)
    wrong = {t: existing[t] for t in co_partitioned if existing[t] != settings.partitions}
    if wrong:
        listing = ", ".join(f"{t} has {n}" for t, n in sorted(wrong.items()))
        raise ConfigError(
            f"topics read together must have --partitions {settings.partitions} partitions, "
            f"but {listing}; recreate them or start the worker with the topics' count"
        )
    for topic in await broker_stamped_topics(settings, inputs):
        say(
            f"WARNING: input topic {topic} is configured with message.timestamp.type="
            "LogAppendTime: a broker's append time moves with the records queued ahead of a "
            "record, so near a close instant one record can decide whether another counts; set "
            "message.timestamp.type=CreateTime on it (docs/operating.md, section 2)"
        )


async def broker_stamped_topics(settings: DaemonSettings, topics: Sequence[str]) -> list[str]:
    """The ``topics`` whose configuration stamps records with the broker's append time, as
    the broker describes them (one DescribeConfigs request). A broker that cannot describe
    topic configurations (the embedded one, say) gives none, and says so in one line."""
    if not topics:
        return []
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    admin = AIOKafkaAdminClient(
        bootstrap_servers=[b.strip() for b in settings.bootstrap.split(",")],
        request_timeout_ms=10_000,
        **_client_security(settings),
    )
    wanted = {TIMESTAMP_TYPE: None}
    try:
        await asyncio.wait_for(admin.start(), timeout=15.0)
        responses = await asyncio.wait_for(
            admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, t, wanted) for t in topics]
            ),
            timeout=15.0,
        )
    except Exception as error:  # advice only: never stops the worker
        say(
            f"the broker at {settings.bootstrap} does not describe topic configurations "
            f"({type(error).__name__}), so the input topics' {TIMESTAMP_TYPE} is not checked; "
            "keep it CreateTime (docs/operating.md, section 2)"
        )
        return []
    finally:
        await admin.close()
    return sorted(
        name
        for response in responses
        for _error, _message, _kind, name, entries in response.resources
        for entry in entries
        if entry[0] == TIMESTAMP_TYPE and entry[1] == "LogAppendTime"
    )


async def _wait_for_topics(
    settings: DaemonSettings, retry_seconds: float, warned: float
) -> dict[str, int]:
    while True:
        try:
            return await _broker_topics(settings)
        except (TimeoutError, OSError) as error:
            now = time.monotonic()
            if now - warned >= 30.0:
                say(
                    f"no Kafka broker answers at {settings.bootstrap} ({type(error).__name__}); "
                    "waiting for it before starting (start one: streamdp broker --config SPEC; "
                    "or fix --bootstrap). Ctrl-C stops"
                )
                warned = now
            await asyncio.sleep(retry_seconds)


def verify_topics_at_start(
    app: Any, settings: DaemonSettings, required: dict[str, int], inputs: Sequence[str] = ()
) -> None:
    """Run :func:`verify_topics` first thing when ``app`` (a ``faust.App``) starts, for workers
    started by Faust's own CLI; a problem ends the process with status 78 and one line."""
    first_start = app.on_first_start

    async def verify_then_start() -> None:
        try:
            await verify_topics(settings, required, inputs)
        except ConfigError as error:
            say(f"fatal configuration problem, exit status {EXIT_CONFIG}: {error}")
            os._exit(EXIT_CONFIG)
        await first_start()

    app.on_first_start = verify_then_start


def say(line: str) -> None:
    """One line on stderr (logging is set up only when Faust's worker starts)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _co_partitioned(settings: DaemonSettings, required: dict[str, int]) -> list[str]:
    outputs = {settings.topics.releases, settings.topics.consistent, settings.topics.dead_letter}
    return [t for t in required if t not in outputs]


async def _broker_topics(settings: DaemonSettings) -> dict[str, int]:
    """Topic -> partition count, from one metadata request (which creates no topic)."""
    from aiokafka import AIOKafkaClient
    from aiokafka.errors import KafkaError

    client = AIOKafkaClient(
        bootstrap_servers=[b.strip() for b in settings.bootstrap.split(",")],
        request_timeout_ms=10_000,
        **_client_security(settings),
    )
    try:
        try:
            await asyncio.wait_for(client.bootstrap(), timeout=15.0)
            metadata = await asyncio.wait_for(client.fetch_all_metadata(), timeout=15.0)
        except KafkaError as error:
            raise ConnectionError(str(error)) from error
        return {t: len(metadata.partitions_for_topic(t) or ()) for t in metadata.topics()}
    finally:
        await client.close()


def _client_security(settings: DaemonSettings) -> dict[str, Any]:
    if settings.security_protocol == "PLAINTEXT":
        return {}
    import ssl

    options: dict[str, Any] = {"security_protocol": settings.security_protocol}
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(cafile=settings.ssl_cafile)
        if settings.ssl_certfile:
            context.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile)
        options["ssl_context"] = context
    if settings.security_protocol.startswith("SASL"):
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"] = settings.sasl_username
        options["sasl_plain_password"] = settings.sasl_password
    return options
