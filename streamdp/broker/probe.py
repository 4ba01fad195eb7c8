"""A minimal, synchronous Kafka Metadata probe (no event loop, no client library).

Used to decide that a freshly started broker is ready: it answers a Metadata request (API key 3,
version 0) and advertises the address we asked it to advertise. Sending one request with the
standard library keeps readiness checks independent of asyncio, so they work from inside a
running event loop, a pytest fixture or a plain script alike.

Wire format (Kafka protocol guide, "Metadata API", v0): request = int32 size, int16 api_key,
int16 api_version, int32 correlation_id, string client_id, array<string> topics (empty = all);
response = int32 size, int32 correlation_id, array<(int32 node_id, string host, int32 port)>
brokers, array<...> topics (not parsed).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

_METADATA_API_KEY = 3
_CORRELATION_ID = 0x5D5D
_CLIENT_ID = b"streamdp-probe"


@dataclass(frozen=True)
class AdvertisedBroker:
    """One broker entry of a Metadata response."""

    node_id: int
    host: str
    port: int


class ProbeError(Exception):
    """The peer did not answer a Kafka Metadata request the way a broker does."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks: list[bytes] = []
    remaining = n
    while remaining > 0:
        chunk = sock.recv(remaining)
        if not chunk:
            raise ProbeError(f"connection closed after {n - remaining} of {n} bytes")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def metadata_brokers(host: str, port: int, timeout: float = 2.0) -> list[AdvertisedBroker]:
    """Send one Metadata v0 request to ``host:port`` and return the advertised brokers.

    Raises :class:`OSError` if the TCP connection fails and :class:`ProbeError` if the answer is
    not a well-formed Metadata response.
    """
    header = struct.pack(">hhih", _METADATA_API_KEY, 0, _CORRELATION_ID, len(_CLIENT_ID))
    body = struct.pack(">i", 0)  # empty topic list
    payload = header + _CLIENT_ID + body
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        if not 8 <= size <= 1 << 24:
            raise ProbeError(f"implausible response size {size}")
        response = _recv_exact(sock, size)
    (correlation_id, n_brokers) = struct.unpack_from(">ii", response, 0)
    if correlation_id != _CORRELATION_ID:
        raise ProbeError(f"correlation id {correlation_id} != {_CORRELATION_ID}")
    brokers: list[AdvertisedBroker] = []
    pos = 8
    for _ in range(n_brokers):
        (node_id, host_len) = struct.unpack_from(">ih", response, pos)
        pos += 6
        broker_host = response[pos : pos + host_len].decode("utf-8")
        pos += host_len
        (broker_port,) = struct.unpack_from(">i", response, pos)
        pos += 4
        brokers.append(AdvertisedBroker(node_id, broker_host, broker_port))
    return brokers
