"""The topic namespace: the prefix of the topics a worker writes and the feed reads
(``<namespace>.releases``, ``.consistent``, ``.dead-letter``, ``.control``), checked in one
place for every way it is given (``--topic-namespace``, ``STREAMDP_TOPIC_NAMESPACE``)."""

from __future__ import annotations

import re

from streamdp.errors import ConfigError

#: The namespace when none is given.
DEFAULT_NAMESPACE = "streamdp"
#: A prefix that makes legal Kafka topic names with every suffix (at most 249 characters).
_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


def check_namespace(namespace: str, given_as: str = "--topic-namespace") -> str:
    """``namespace`` if it is a topic name prefix, else :class:`ConfigError` naming how it was
    ``given_as`` and the value."""
    if not _NAMESPACE.match(namespace):
        raise ConfigError(
            f"{given_as} must be a topic name prefix such as {DEFAULT_NAMESPACE!r} (letters, "
            f"digits, '.', '_', '-'; at most 201 characters), got {namespace!r}"
        )
    return namespace
