"""Kafka records in words, for ``streamdp tail`` (:mod:`streamdp.tail_cli`, the adapter that
reads the topic): ``partition@offset time`` and then streamdp's own records in words (a
release's stream, counter, period, noisy count and running total with their standard
deviations; a consistent revision's values; a dead letter's reason and where it came from,
without the raw record), any other value as ``key value`` with JSON re-serialized compactly; or
one JSON object per record for scripts. Values that are not JSON are shown safely: UTF-8 text
as an escaped JSON string, anything else as base64 (json) or a short hex preview (pretty);
control characters never reach the terminal raw. Pure: no client, no I/O."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

_HEX_PREVIEW = 24


@dataclass(frozen=True)
class TailRecord:
    """One consumed record, as bytes (no decoding yet)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None


def _decode(raw: bytes | None) -> tuple[str, Any]:
    """Classify ``raw``: ("null", None) | ("json", obj) | ("text", str) | ("binary", bytes)."""
    if raw is None:
        return "null", None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "binary", raw
    try:
        return "json", json.loads(text)
    except ValueError:
        return "text", text


def _pretty_part(raw: bytes | None) -> str:
    kind, obj = _decode(raw)
    if kind == "null":
        return "null"
    if kind == "json":
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    if kind == "text":
        return json.dumps(obj, ensure_ascii=False)  # quoted, control characters escaped
    data: bytes = obj
    preview = data[:_HEX_PREVIEW].hex()
    more = "..." if len(data) > _HEX_PREVIEW else ""
    return f"<{len(data)} bytes 0x{preview}{more}>"


def _json_part(raw: bytes | None) -> dict[str, Any] | None:
    kind, obj = _decode(raw)
    if kind == "null":
        return None
    if kind == "json":
        return {"json": obj}
    if kind == "text":
        return {"text": obj}
    return {"base64": base64.b64encode(obj).decode("ascii")}


def format_pretty(record: TailRecord) -> str:
    """``p<partition>@<offset> <UTC time>`` and the record: a streamdp release, consistent or
    dead-letter record in words (:func:`describe_record`), anything else as ``<key> <value>``."""
    when = (
        datetime.fromtimestamp(record.timestamp_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if record.timestamp_ms is not None and record.timestamp_ms >= 0
        else "-"
    )
    kind, value = _decode(record.value)
    described = describe_record(value) if kind == "json" else None
    if described is not None:
        return f"p{record.partition}@{record.offset} {when} {described}"
    return (
        f"p{record.partition}@{record.offset} {when} "
        f"{_pretty_part(record.key)} {_pretty_part(record.value)}"
    )


def _word(value: Any) -> str:
    """``value`` as one printable word: plain if it is, else JSON-quoted (escapes shown)."""
    text = str(value)
    if text and text.isprintable() and " " not in text:
        return text
    quoted = json.dumps(text, ensure_ascii=False)
    return quoted if quoted.isprintable() else json.dumps(text)


def _number(value: Any) -> str:
    """A count or an estimate with thousands separators (one decimal for non-integers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _word(value)
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}"


def _sd(value: Any) -> str:
    return f"sd {value:.3g}" if isinstance(value, int | float) else f"sd {_word(value)}"


def _budget_words(value: dict[str, Any]) -> str:
    """A release's budget: ``epsilon E``, or for a zCDP release ``rho R (epsilon E at delta
    D)`` (its ``epsilon`` is the (epsilon, delta) bound of rho, not a pure-DP epsilon)."""
    epsilon = f"epsilon {_word(value.get('epsilon'))}"
    if value.get("privacy_definition") != "zcdp":
        return epsilon
    delta = _word(value.get("privacy_delta"))
    return f"zCDP rho {_word(value.get('rho'))} ({epsilon} at delta {delta})"


def _unit_field(value: dict[str, Any]) -> object:
    """The field naming a release's privacy unit (None: it protects one event)."""
    unit = value.get("privacy_unit")
    return unit.get("field") if isinstance(unit, dict) else None


def describe_record(value: Any) -> str | None:
    """A streamdp output record (``kind`` release, consistent or dead_letter) in words on one
    line, or None for anything else. A dead letter's raw record is left out (``--format json``
    shows it; it is protected like the input topic)."""
    if not isinstance(value, dict):
        return None
    kind = value.get("kind")
    if kind == "dead_letter":
        origin = f"{_word(value.get('topic'))}@{_word(value.get('offset'))}"
        stream = value.get("stream")
        event_id = value.get("event_id")  # None: the record had none (malformed, say)
        return (
            f"dead letter {_word(value.get('reason'))} from {origin}"
            + (f" stream {_word(stream)}" if stream else "")
            + (f" event {_word(event_id)}" if event_id is not None else " (no event id)")
            + f": {_word(value.get('message', ''))} "
            f"(raw {_word(value.get('raw_length'))} bytes; --format json shows it)"
        )
    try:
        where = f"epoch {_word(value['epoch'])} period {_word(value['period'])}"
        span = f"[{_word(value.get('period_start', '?'))}, {_word(value.get('period_end', '?'))})"
        if kind == "release":
            return (
                f"release {_word(value['stream'])}/{_word(value['counter'])} {where} {span}: "
                f"count {_number(value['noisy_count'])} ({_sd(value['count_std'])}), "
                f"running total {_number(value['noisy_total'])} ({_sd(value['total_std'])}); "
                f"{_budget_words(value)}"
                + (f" per {_word(_unit_field(value))}" if _unit_field(value) else "")
                + f" per epoch, {_word(value.get('mechanism'))}"
            )
        if kind == "consistent":
            totals = value.get("totals") or {}
            stds = value.get("total_std") or {}
            values = ", ".join(
                f"{_word(name)} {_number(total)}"
                + (f" ({_sd(stds[name])})" if name in stds else "")
                for name, total in totals.items()
            )
            return (
                f"consistent {_word(value['stream'])} revision {_word(value['revision'])} "
                f"{where} {span}: running totals {values}"
            )
    except (KeyError, TypeError, AttributeError):
        return None
    return None


def format_json(record: TailRecord) -> str:
    """One JSON object; ``key``/``value`` are ``{"json": ...}``, ``{"text": ...}``,
    ``{"base64": ...}`` or null."""
    return json.dumps(
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp_ms": record.timestamp_ms,
            "key": _json_part(record.key),
            "value": _json_part(record.value),
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )
