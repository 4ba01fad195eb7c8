"""The operator's control records (read from the control topic only, never from input): the
one action is ``close``, checked here. An operator may release the periods of a stream ending
at or before ``through`` early, never periods that have not ended by the worker's clock."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamdp.engine.events import RejectedError
from streamdp.engine.periods import format_instant, parse_instant
from streamdp.engine.results import NEVER


def close_request(
    event: Mapping[str, Any], streams: Mapping[str, object], now: float
) -> tuple[str, float]:
    """``(stream, through)`` of a close control record, checked against the configured
    ``streams`` and the clock reading ``now``. :class:`RejectedError` (``bad_control``,
    ``unknown_stream``) says what is wrong with it."""
    action = event.get("action")
    if action != "close":
        raise RejectedError(
            "bad_control",
            f"control 'action' must be 'close', got {action!r} (the 'watermark' action "
            "was removed: periods close on the public clock)",
        )
    stream = event.get("stream")
    if not isinstance(stream, str) or stream not in streams:
        raise RejectedError(
            "unknown_stream",
            f"control record names stream {stream!r}; it may name: " + ", ".join(streams),
        )
    through = parse_instant(event.get("through"))
    if through is None:
        raise RejectedError(
            "bad_control",
            "close control record needs 'through': RFC 3339 text with offset or seconds",
        )
    if through > now:
        raise RejectedError(
            "bad_control",
            f"close 'through' {format_instant(through)} is after the worker's clock "
            f"({format_instant(now) if now > NEVER else 'not started'}): only "
            "periods that have ended can be released early",
        )
    return stream, through
