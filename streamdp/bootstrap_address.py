"""Checking a ``--bootstrap`` value: one or more comma-separated ``HOST:PORT`` broker addresses.

One check for every command that takes it (tail, produce, feed, worker), so that a port out of
range is refused in one line instead of failing in the Kafka client (an OverflowError for
``127.0.0.1:99999``).
"""

from __future__ import annotations

import re

from streamdp.errors import ConfigError

_ADDRESS = re.compile(r"^[A-Za-z0-9._\-\[\]:]+:(\d{1,5})$")
MAX_PORT = 65535


def check_bootstrap(value: str, flag: str = "--bootstrap") -> str:
    """``value`` if every comma-separated address in it is ``HOST:PORT`` with a port in
    1-65535; else :class:`ConfigError` naming ``flag``, the value and the bad port."""
    for address in value.split(","):
        match = _ADDRESS.match(address)
        if match is None:
            raise ConfigError(
                f"{flag} must be HOST:PORT[,HOST:PORT...] (e.g. 127.0.0.1:9092), got {value!r}"
            )
        port = int(match.group(1))
        if not 1 <= port <= MAX_PORT:
            raise ConfigError(
                f"{flag} {value!r}: port {port} is not a TCP port; give a port from 1 to {MAX_PORT}"
            )
    return value
