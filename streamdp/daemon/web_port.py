"""Check, before Faust starts, that the worker can listen on its ``/metrics`` and ``/status``
address.

Faust binds the web port only once its worker has started: a taken port then ended the process
with Faust's start-up log and a traceback (``OSError: [Errno 98] address already in use``) and
exit status 1. Binding it here first turns that into one line and status 78 (configuration).
"""

from __future__ import annotations

import errno
import socket

from streamdp.errors import ConfigError


def check_web_port(host: str, port: int) -> None:
    """Raise :class:`ConfigError` unless every address ``host`` resolves to can listen on
    ``port`` now.

    Binds as asyncio's server (and so Faust's web server) does: with ``SO_REUSEADDR``, so a
    port left in TIME_WAIT by a stopped worker (whose server set it too) passes, and IPv6
    sockets IPv6-only. The sockets are closed at once; a process that takes the port between
    this check and Faust's start still makes Faust fail.
    """
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise ConfigError(
            f"--web-host {host!r} does not resolve ({error.strerror}); pass an address of this "
            f"machine, e.g. 127.0.0.1 or 0.0.0.0"
        ) from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
                probe.listen(1)
            except OSError as error:
                where = f"{address[0]}:{port}"
                if error.errno == errno.EADDRINUSE:
                    raise ConfigError(
                        f"--web-port {port} is already in use on {address[0]} (another worker or "
                        f"program listens there); stop it or give this worker another "
                        f"--web-port / STREAMDP_WEB_PORT"
                    ) from None
                raise ConfigError(
                    f"cannot listen on --web-host {host!r} --web-port {port} ({where}: "
                    f"{error.strerror}); pass an address of this machine and a port this user "
                    f"may bind"
                ) from None
