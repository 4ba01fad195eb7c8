"""Stream kinds as plug-ins: one module per kind of counters (see :mod:`streamdp.kinds.base`).

:data:`KINDS` maps a ``counters.kind`` value to its :class:`~streamdp.kinds.base.StreamKind`;
the spec parser, the event extractors and the consistency projection ask it, and nothing else
in the package knows what a kind's counters are.
"""

from __future__ import annotations

from collections.abc import Mapping

from streamdp.kinds import attributes, flag, items, places
from streamdp.kinds.base import StreamKind

KINDS: Mapping[str, StreamKind] = {
    items.KIND.name: items.KIND,
    attributes.KIND.name: attributes.KIND,
    flag.KIND.name: flag.KIND,
    places.KIND.name: places.KIND,
}


def stream_kind(name: str) -> StreamKind:
    """The kind called ``name`` (a validated ``counters.kind``)."""
    return KINDS[name]


__all__ = ["KINDS", "StreamKind", "stream_kind"]
