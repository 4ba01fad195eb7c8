"""Each counter's own optional release fields (a budget group's share; a place in the public
tree and its cell), built when a record is serialised.

A places stream has up to millions of counters; a dict of fields per counter (and the place
dict inside it) held for the stream's life cost about 420 bytes per counter. Here the stream
keeps the places' columns once (identifiers, parents, labels, levels: the places file's own
data); every release record of the stream holds the same :class:`CounterFields` and its
counter index, and builds its fields when serialised. The JSON is the same, field for field
and in the same order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING

from streamdp.continual.exact_float import float_at_least
from streamdp.engine import json_text
from streamdp.engine.spec import StreamSpec

if TYPE_CHECKING:
    from streamdp.engine.budget_groups import BudgetGroup
    from streamdp.kinds.places_file import Places

_NOTHING: Mapping[str, object] = MappingProxyType({})


@dataclass(frozen=True)
class PlaceColumns:
    """The places of a stream as columns (one entry per place) and its cells."""

    ids: tuple[str, ...]
    parents: tuple[str | None, ...]
    labels: tuple[str, ...]
    levels: tuple[int, ...]
    cells: tuple[str, ...]  # empty: no attributes (one counter per place)

    def place_json(self, index: int) -> str:
        """``"place":{...}`` of :meth:`place` as JSON members text (``json.dumps``'s)."""
        parent = self.parents[index]
        return (
            f'"place":{{"node":{json_text.string(self.ids[index])}'
            f',"parent":{"null" if parent is None else json_text.string(parent)}'
            f',"label":{json_text.string(self.labels[index])}'
            f',"level":{self.levels[index]}}}'
        )

    def place(self, index: int) -> dict[str, object]:
        return {
            "node": self.ids[index],
            "parent": self.parents[index],
            "label": self.labels[index],
            "level": self.levels[index],
        }


@lru_cache(maxsize=8)
def place_columns(places: Places, cells: tuple[str, ...]) -> PlaceColumns:
    """:class:`PlaceColumns` of ``places`` (built once per places and cells)."""
    parent = places.tree.parent.tolist()
    return PlaceColumns(
        ids=places.ids,
        parents=tuple(None if p < 0 else places.ids[p] for p in parent),
        labels=tuple(places.labels),
        levels=tuple(places.depth.tolist()),
        cells=cells,
    )


class CounterFields:
    """Per counter (:meth:`of`), its own optional release fields; one shared empty mapping for
    a counter that has none. Made once per stream and shared by all its release records: a
    record asks for its counter's fields only when it is serialised (see the module)."""

    def __init__(self, spec: StreamSpec) -> None:
        from streamdp.engine.budget_groups import budget_groups

        self._width = spec.counters.width
        key = "epsilon" if spec.rho is None else "rho"
        #: (start, stop, its fields) of every budget group, in counter order
        self._groups = [
            (
                group.start,
                group.stop,
                MappingProxyType(
                    {
                        "budget_group": {
                            "name": group.name,
                            "share": float(group.share),
                            key: _group_budget(spec, group),
                        }
                    }
                ),
            )
            for group in budget_groups(spec)
        ]
        #: (start, stop, its fields as JSON members with a leading comma) of every group
        self._group_texts = [
            (start, stop, json_text.members(fields)) for start, stop, fields in self._groups
        ]
        self._columns: PlaceColumns | None = None
        places = spec.counters.places
        if spec.counters.kind == "places" and places is not None:
            from streamdp.kinds.attributes import cell_names

            attributes = spec.counters.attributes
            cells = tuple(cell_names(attributes)) if attributes else ()
            self._columns = place_columns(places, cells)

    def __len__(self) -> int:
        return self._width

    def of(self, c: int) -> Mapping[str, object]:
        """Counter ``c``'s fields: its ``budget_group`` (when the stream has groups), its
        ``place`` (``node``, ``parent``, null at the root, ``label``, ``level``, 0 at the root)
        and, with attributes, its ``cell``, in that order; built on each call."""
        if not 0 <= c < self._width:
            raise IndexError(c)
        group = next((f for start, stop, f in self._groups if start <= c < stop), None)
        columns = self._columns
        if columns is None:
            return _NOTHING if group is None else group
        out: dict[str, object] = {} if group is None else dict(group)
        if columns.cells:
            cells = len(columns.cells)
            out["place"] = columns.place(c // cells)
            out["cell"] = columns.cells[c % cells]
        else:
            out["place"] = columns.place(c)
        return out

    def json_of(self, c: int) -> str:
        """:meth:`of` as the members of a JSON object with a leading comma ("" when counter
        ``c`` has none): the end of its release record's text, as ``json.dumps`` writes it."""
        if not 0 <= c < self._width:
            raise IndexError(c)
        group = next((t for start, stop, t in self._group_texts if start <= c < stop), "")
        columns = self._columns
        if columns is None:
            return group
        if columns.cells:
            cells = len(columns.cells)
            cell = json_text.string(columns.cells[c % cells])
            return f'{group},{columns.place_json(c // cells)},"cell":{cell}'
        return f"{group},{columns.place_json(c)}"

    def __eq__(self, other: object) -> bool:
        """The same fields for every counter (two runs of one spec)."""
        if not isinstance(other, CounterFields):
            return NotImplemented
        return (
            self._width == other._width
            and self._groups == other._groups
            and (self._columns is other._columns or self._columns == other._columns)
        )

    __hash__ = None  # type: ignore[assignment]


def _group_budget(spec: StreamSpec, group: BudgetGroup) -> float:
    """What the group spends, as published: the epsilon its noise is calibrated on (the exact
    share rounded down, :func:`~streamdp.engine.budget_groups.group_epsilon`), or its exact
    share of rho rounded up (a float never below the spend). ``float(budget) * float(share)``
    rounded to nearest and could show one ulp more than the group uses (places audit of
    2026-11-28)."""
    from streamdp.engine.budget_groups import group_epsilon

    if spec.rho is None:
        return group_epsilon(spec, group)
    return float_at_least(Fraction(spec.rho) * group.share)
