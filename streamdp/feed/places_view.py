"""The feed's view of a places stream (issue 29): the public tree, the latest period of every
place, and one place's series on demand (pure).

A county stream has thousands of counters: embedding every counter's series in the page would
take tens of MB, so ``feed.json`` carries the tree (``nodes``), the latest period's values and
the newest consistent period's values of every counter as columns aligned with the tree (place
major, cells inner), and the root's series; another place's series is its own small document
(:func:`place_series`, served as ``series/<stream>/<place index>.json``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamdp.feed.records import Consistent, Release

#: The period columns of one counter's series (aligned with the stream's ``periods``).
SERIES = (
    "noisy_count",
    "count_std",
    "noisy_total",
    "total_std",
    "consistent_total",
)

Period = tuple[int, int]


@dataclass(frozen=True)
class PlaceTree:
    """A places stream's tree as its releases state it: ``nodes`` in declared order (each
    ``(identifier, parent position or None, label, level)``), the cells (empty: no attributes)
    and the counter of every (place, cell) position, place major (None: never released)."""

    nodes: tuple[tuple[str, int | None, str, int], ...]
    cells: tuple[str, ...]
    counters: tuple[str | None, ...]

    @property
    def width(self) -> int:
        return max(len(self.cells), 1)

    def place_counters(self, place: int) -> list[str]:
        """The counters of the place at position ``place`` that have releases."""
        row = self.counters[place * self.width : (place + 1) * self.width]
        return [name for name in row if name is not None]


def place_tree(latest: Mapping[str, Release]) -> PlaceTree | None:
    """The tree of a stream from one release per counter (``latest``, in declared order), or
    None when its releases carry no ``place`` (not a places stream, or written before they
    did). A place whose parent is not among them is shown as a root."""
    if not latest or any(r.place is None for r in latest.values()):
        return None
    position: dict[str, int] = {}
    rows: list[tuple[str, str | None, str, int]] = []
    cells: list[str] = []
    for release in latest.values():
        place = release.place
        assert place is not None
        if place.node not in position:
            position[place.node] = len(rows)
            rows.append((place.node, place.parent, place.label, place.level))
        if release.cell is not None and release.cell not in cells:
            cells.append(release.cell)
    nodes = tuple(
        (n, position.get(p) if p is not None else None, lab, lev) for n, p, lab, lev in rows
    )
    width = max(len(cells), 1)
    cell_at = {cell: i for i, cell in enumerate(cells)}
    counters: list[str | None] = [None] * (len(nodes) * width)
    for name, release in latest.items():
        assert release.place is not None
        column = 0 if release.cell is None else cell_at[release.cell]
        counters[position[release.place.node] * width + column] = name
    return PlaceTree(nodes, tuple(cells), tuple(counters))


def places_document(
    tree: PlaceTree,
    releases: Mapping[str, Mapping[Period, Release]],
    latest: Period,
    newest: Consistent | None,
) -> dict[str, Any]:
    """The ``places`` entry of a stream in ``feed.json``: the tree, the cells, the ``latest``
    period's released values and the ``consistent`` values of the newest revised period
    (null before the first revision), each as columns aligned with ``tree.counters``."""
    columns: dict[str, list[Any]] = {
        "noisy_count": [],
        "count_std": [],
        "noisy_total": [],
        "total_std": [],
    }
    for name in tree.counters:
        release = None if name is None else releases.get(name, {}).get(latest)
        columns["noisy_count"].append(None if release is None else release.noisy_count)
        columns["count_std"].append(None if release is None else release.count_std)
        columns["noisy_total"].append(None if release is None else release.noisy_total)
        columns["total_std"].append(None if release is None else release.total_std)
    consistent = None
    if newest is not None:

        def aligned(values: Mapping[str, float] | Mapping[str, int] | None) -> list[Any]:
            if values is None:
                return [None] * len(tree.counters)
            return [None if n is None else values.get(n) for n in tree.counters]

        consistent = {
            "revision": newest.revision,
            "periods_covered": newest.periods_covered,
            "constraint": newest.constraint,
            "epoch": newest.epoch,
            "period": newest.period,
            "period_start": newest.period_start,
            "period_end": newest.period_end,
            "count": aligned(newest.counts),
            "count_std": aligned(newest.count_std),
            "total": aligned(newest.totals),
            "total_std": aligned(newest.total_std),
            # null when the stream does not publish non-negative integer estimates
            "nonnegative_total": None
            if newest.nonnegative_totals is None
            else aligned(newest.nonnegative_totals),
        }
    return {
        "nodes": [list(node) for node in tree.nodes],
        "cells": list(tree.cells),
        "latest": {"epoch": latest[0], "period": latest[1], **columns},
        "consistent": consistent,
    }


def counter_series(
    name: str,
    by_period: Mapping[Period, Release],
    periods: Sequence[Period],
    revisions: Mapping[Period, Consistent],
) -> dict[str, Any]:
    """One counter's series as columns aligned with ``periods`` (:data:`SERIES`; null where
    the counter has no value), the consistent total from the latest revision of each period."""
    columns: dict[str, list[Any]] = {column: [] for column in SERIES}
    for key in periods:
        release = by_period.get(key)
        revised = revisions.get(key)
        columns["noisy_count"].append(None if release is None else release.noisy_count)
        columns["count_std"].append(None if release is None else release.count_std)
        columns["noisy_total"].append(None if release is None else release.noisy_total)
        columns["total_std"].append(None if release is None else release.total_std)
        columns["consistent_total"].append(
            None if release is None or revised is None else revised.totals.get(name)
        )
    return {"counter": name, **columns}


def place_series(
    stream: str,
    tree: PlaceTree,
    place: int,
    *,
    releases: Mapping[str, Mapping[Period, Release]],
    periods: Sequence[tuple[int, int, str, str]],
    revisions: Mapping[Period, Consistent],
) -> dict[str, Any]:
    """The series of every counter of the place at position ``place`` (one per cell), in the
    shape of a stream's ``counters`` in ``feed.json``, with the stream's ``periods``."""
    keys = [(epoch, period) for epoch, period, _, _ in periods]
    node, _, label, level = tree.nodes[place]
    return {
        "stream": stream,
        "place": node,
        "label": label,
        "level": level,
        "periods": [list(p) for p in periods],
        "counters": [
            counter_series(name, releases.get(name, {}), keys, revisions)
            for name in tree.place_counters(place)
        ],
    }
