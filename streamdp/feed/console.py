"""The operator's console of ``streamdp feed``: what the feed read but did not show.

Records that are not JSON, of another kind, of a schema version the feed does not know, or
missing a field are never shown on the public page (docs/consuming.md, section 6: route them to
a side channel). This says how many, by reason, on stderr: each time the counts changed.
"""

from __future__ import annotations

import sys
from typing import TextIO

from streamdp.feed.model import FeedView


def ignored_line(by_reason: dict[str, int]) -> str:
    """``by_reason`` in one line: "3 records not shown: 2 schema_version 99, 1 not JSON"."""
    total = sum(by_reason.values())
    parts = ", ".join(f"{n} {reason}" for reason, n in sorted(by_reason.items()))
    return f"{total} record{'' if total == 1 else 's'} not shown: {parts}"


class IgnoredReporter:
    """Call after reading: writes :func:`ignored_line` to ``out`` when the view's counts of
    records not shown changed since the last call (nothing when there are none)."""

    def __init__(self, view: FeedView, out: TextIO | None = None) -> None:
        self.view = view
        self.out = out
        self._said: dict[str, int] = {}

    def __call__(self) -> None:
        now = dict(self.view.ignored_by_reason)
        if now == self._said:
            return
        self._said = now
        if now:
            out = self.out if self.out is not None else sys.stderr
            out.write(
                f"streamdp feed: warning: {ignored_line(now)} (docs/consuming.md, section 6)\n"
            )
            out.flush()
