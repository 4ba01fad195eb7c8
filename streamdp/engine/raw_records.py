"""The raw record as the engine keeps it: a digest of its exact content (to tell a producer's
retry from another record) and its text for a dead letter."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping

from streamdp.engine.results import RawRecord


def content_key(record: RawRecord) -> str:
    """A digest of the record's exact content (128-bit BLAKE2b, hex): equal for a producer's
    retry or a redelivery of the same record, different for any other record."""
    if type(record) is bytes:  # the daemon's per-record path: no ABC check, no copy
        return hashlib.blake2b(record, digest_size=16).hexdigest()
    if isinstance(record, Mapping):
        data = json.dumps(record, sort_keys=True, default=str).encode("utf-8", "surrogatepass")
    elif isinstance(record, str):
        data = record.encode("utf-8", "surrogatepass")
    else:
        data = bytes(record)
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def raw_text(record: RawRecord) -> tuple[str, str]:
    """The raw record as text for a dead letter: UTF-8, else base64 of the bytes."""
    if isinstance(record, Mapping):
        try:
            return json.dumps(record, sort_keys=True, default=str), "utf-8"
        except (TypeError, ValueError):
            return repr(dict(record)), "utf-8"
    if isinstance(record, str):
        return record, "utf-8"
    try:
        return bytes(record).decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(bytes(record)).decode("ascii"), "base64"
