"""Counters by place (issue 29; seeds 000 and 003): one counter per place of a public hierarchy
(nation -> state -> county, or any tree, read from the CSV file the spec names; see
:mod:`streamdp.kinds.places_file`), optionally crossed with the cells of categorical attributes
(every place x every cell of the attributes' cross product).

An event names its place, a leaf of the tree, in ``attributes.<field>`` (and one category of
each attribute): it adds 1 to that leaf and to every place above it, in its cell. One event
changes one counter per level, so the sensitivity is at least the number of levels ``h`` (the
root's included), and the squared L2 norm of its contribution is at most ``h``.

Constraint ``tree``: every place's count equals the sum of its children's, in every cell.
Every counter of the stream shares one strategy and one noise scale, so a node's counter vector
is projected orthogonally onto that subspace (DESIGN §4 "in the daemon"): per cell, the exact
two-pass tree projection of :mod:`streamdp.consistency.tree`, O(counters), never a dense
matrix. The projected variance of each counter is known in closed form
(:func:`~streamdp.consistency.tree.tree_projection_variances`).

Counter layout: place-major, cells inner (counter ``place * cells + cell``); a counter is named
by its place's identifier, followed by ``/`` and the cell (``sex=female,age=0-17``) when the
stream has attributes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np

from streamdp.consistency.tree import tree_projection, tree_projection_variances
from streamdp.engine.events import Contribution, Extractor, RejectedError
from streamdp.errors import ConfigError
from streamdp.kinds.attributes import cell_names, census_layout, read_attributes
from streamdp.kinds.base import FloatArray, refuse_clip
from streamdp.kinds.places_file import read_places, resolve_places_path

if TYPE_CHECKING:
    from streamdp.engine.config_reader import ConfigReader
    from streamdp.engine.spec import ConstraintSpec, CounterSpec, StreamSpec
    from streamdp.kinds.places_file import Places

#: Most counters of one places stream (places x cells).
MAX_PLACE_COUNTERS = 10_000_000


class PlacesKind:
    """The ``places`` stream kind."""

    name = "places"
    source_kind = "person"
    constraint_kinds: tuple[str, ...] = ("tree",)

    def parse_counters(self, reader: ConfigReader, table: dict[str, Any]) -> CounterSpec:
        from streamdp.engine.spec import CounterSpec

        if "attribute_weights" in table:
            raise reader.fail(
                "counters.attribute_weights",
                "applies to kind = 'attributes' (total, marginals, cells); a places stream's "
                "cells hold every attribute at once (one event adds to one cell per level): "
                "weigh its levels with level_weights",
            )
        reader.only(
            table,
            ("kind", "places", "field", "attributes", "places_sha256", "level_weights"),
            "counters",
        )
        written = table.get("places")
        if not isinstance(written, str) or not written.strip():
            raise reader.fail(
                "counters.places",
                "must name the CSV file of the places (columns node,parent,label), relative "
                "to the spec file, e.g. places = 'counties.csv'",
            )
        try:
            places = read_places(resolve_places_path(reader.origin, written), written)
        except ConfigError as error:
            raise reader.fail("counters.places", str(error)) from None
        pinned = table.get("places_sha256")
        if pinned is not None and (
            not isinstance(pinned, str) or re.fullmatch(r"[0-9a-fA-F]{64}", pinned) is None
        ):
            raise reader.fail(
                "counters.places_sha256",
                f"must be the file's SHA-256 as 64 hexadecimal digits (sha256sum prints it), got "
                f"{pinned!r}",
            )
        if pinned is not None and pinned.lower() != places.sha256:
            raise reader.fail(
                "counters.places_sha256",
                f"the file {written!r} has SHA-256 {places.sha256}, not the pinned {pinned!r}; "
                "the places changed: pin the new digest (a running stream's state will not "
                "restore under other places)",
            )
        place_field = reader.name(table.get("field"), "counters.field")
        attributes = (
            read_attributes(reader, table["attributes"], minimum=1) if "attributes" in table else ()
        )
        if place_field in {a.name for a in attributes}:
            raise reader.fail("counters.field", f"{place_field!r} is also an attribute's name")
        cells = int(np.prod([len(a.categories) for a in attributes]))
        if places.size * cells > MAX_PLACE_COUNTERS:
            raise reader.fail(
                "counters",
                f"{places.size} places x {cells} cells = {places.size * cells} counters; at "
                f"most {MAX_PLACE_COUNTERS}",
            )
        return CounterSpec(
            kind="places",
            attributes=attributes,
            places=places,
            place_field=place_field,
            level_weights=_level_weights(reader, table.get("level_weights"), places),
        )

    def parse_constraints(
        self, reader: ConfigReader, table: dict[str, Any], counters: CounterSpec
    ) -> ConstraintSpec:
        from streamdp.engine.spec import ConstraintSpec

        reader.only(table, ("kind",), "constraints")
        return ConstraintSpec(kind="tree")

    def counter_names(self, counters: CounterSpec) -> tuple[str, ...]:
        places = _places(counters)
        cells = cell_names(counters.attributes)
        if cells == [""]:
            return places.ids
        return tuple(f"{place}/{cell}" for place in places.ids for cell in cells)

    def check_contribution_bound(
        self,
        reader: ConfigReader,
        counters: CounterSpec,
        constraints: ConstraintSpec,
        sensitivity: int,
        over_sensitivity: str,
    ) -> None:
        levels = _places(counters).levels
        if sensitivity < levels:
            raise reader.fail(
                "sensitivity",
                f"is {sensitivity}, but the places have {levels} levels and one event adds 1 "
                f"to its place and every place above it; set sensitivity = {levels}",
            )
        refuse_clip(reader, over_sensitivity)

    def l2_squared_bound(
        self, counters: CounterSpec, constraints: ConstraintSpec, sensitivity: int
    ) -> int:
        """An event adds 1 to at most one counter per level: squared L2 norm at most the
        number of levels."""
        return _places(counters).levels

    def extractor(self, spec: StreamSpec) -> Extractor:
        return PlaceExtractor(spec)

    def project(self, spec: StreamSpec, values: FloatArray) -> FloatArray:
        places = _places(spec.counters)
        n = values.shape[0]
        cells = spec.counters.width // places.size
        by_cell = values.reshape(n, places.size, cells).transpose(0, 2, 1)
        projected = tree_projection(by_cell, places.tree)
        out: FloatArray = np.ascontiguousarray(projected.transpose(0, 2, 1)).reshape(n, -1)
        return out

    def projection_diagonal(self, spec: StreamSpec) -> FloatArray:
        """``P_jj`` of the orthogonal projection, per counter, O(counters)."""
        places = _places(spec.counters)
        cells = spec.counters.width // places.size
        return np.repeat(tree_projection_variances(places.tree), cells)

    # budget groups (GroupedKind): one per level, root first
    def budget_group_ranges(self, counters: CounterSpec) -> tuple[tuple[str, int, int], ...]:
        if not counters.level_weights:
            return ()
        places = _places(counters)
        cells = counters.width // places.size
        return tuple(
            (f"level {level}", start * cells, stop * cells)
            for level, (start, stop) in enumerate(places.tree.level_bounds)
        )

    def group_weights(self, counters: CounterSpec) -> tuple[Decimal, ...]:
        return counters.level_weights

    def project_by_group(
        self, spec: StreamSpec, values: FloatArray, group_variances: FloatArray
    ) -> FloatArray:
        return project_by_level(spec, values, group_variances)

    def projected_variances_by_group(
        self, spec: StreamSpec, group_variances: FloatArray
    ) -> FloatArray:
        return projected_variances_by_level(spec, group_variances)


def project_by_level(
    spec: StreamSpec, values: FloatArray, level_variances: FloatArray
) -> FloatArray:
    """Every row of ``values`` (shape (n, width)) projected onto "place = sum of its
    children" by exact GLS, each place weighted by its level's node noise variance in that
    row (``level_variances``, shape (n, levels): a stream with budget groups, whose levels
    carry different noise). O(counters) per row, never a dense matrix."""
    places = _places(spec.counters)
    n = values.shape[0]
    cells = spec.counters.width // places.size
    by_cell = values.reshape(n, places.size, cells).transpose(0, 2, 1)
    weights = np.asarray(level_variances, dtype=np.float64)[:n, places.depth][:, None, :]
    projected = tree_projection(by_cell, places.tree, weights)
    out: FloatArray = np.ascontiguousarray(projected.transpose(0, 2, 1)).reshape(n, -1)
    return out


def projected_variances_by_level(spec: StreamSpec, level_variances: FloatArray) -> FloatArray:
    """The noise variance of every counter after :func:`project_by_level`, per row: shape
    (n, width) from the levels' node variances (n, levels); exact, the projection being the
    GLS estimate under those variances."""
    places = _places(spec.counters)
    cells = spec.counters.width // places.size
    per_place = np.asarray(level_variances, dtype=np.float64)[:, places.depth]
    out: FloatArray = np.repeat(tree_projection_variances(places.tree, per_place), cells, axis=1)
    return out


def _level_weights(reader: ConfigReader, written: Any, places: Places) -> tuple[Decimal, ...]:
    """``counters.level_weights``: one positive number per level, root level first (their
    ratios are the levels' shares of the budget); absent: ``()``."""
    if written is None:
        return ()
    levels = places.levels
    if not isinstance(written, list) or len(written) != levels:
        raise reader.fail(
            "counters.level_weights",
            f"must list one weight per level of the places, root first: {levels} numbers "
            f"such as {[1] * levels}, got {written!r}",
        )
    return tuple(
        reader.epsilon(weight, f"counters.level_weights[{i}]") for i, weight in enumerate(written)
    )


def _places(counters: CounterSpec) -> Places:
    places = counters.places
    if places is None:  # pragma: no cover - parse_counters always sets it
        raise AssertionError("a places stream without places")
    return places


class PlaceExtractor(Extractor):
    """A person record at a leaf place: +1 on the leaf and every place above it, in the
    record's cell."""

    def __init__(self, spec: StreamSpec) -> None:
        counters = spec.counters
        places = _places(counters)
        self.field = counters.place_field
        self.places = places
        self.cells = counters.width // places.size
        self.paths = places.leaf_paths()
        # the places records may not name, known from the start: built at the first refusal,
        # an index of every place stalled the worker for that record (0.6 s at 10^6 places;
        # audit of 2026-11-28), and the work a record costs may not depend on records before it
        self.inner = places.inner_ids()
        # a cell's index in the row-major cross product: the census layout's cell strides
        strides = census_layout(counters.attributes).strides
        self.lookup = [
            (a.name, {c: j * stride for j, c in enumerate(a.categories)}, ", ".join(a.categories))
            for a, stride in zip(counters.attributes, strides, strict=True)
        ]

    def contribution(self, event: Mapping[str, Any]) -> Contribution:
        attrs = event.get("attributes")
        if not isinstance(attrs, dict):
            raise RejectedError("schema_violation", "field 'attributes' must be an object")
        place = attrs.get(self.field)
        if place is None:
            raise RejectedError("schema_violation", f"attributes.{self.field}: missing")
        path = self.paths.get(place) if isinstance(place, str) else None
        if path is None:
            inner = isinstance(place, str) and place in self.inner
            raise RejectedError(
                "unknown_category",
                f"attributes.{self.field}: "
                + (
                    "names a place that has places under it; records name a leaf place"
                    if inner
                    else f"not a place of {self.places.path!r}"
                ),
            )
        cell = 0
        for name, steps, allowed in self.lookup:
            value = attrs.get(name)
            if value is None:
                raise RejectedError("schema_violation", f"attributes.{name}: missing")
            step = steps.get(value) if isinstance(value, str) else None
            if step is None:
                raise RejectedError(
                    "unknown_category", f"attributes.{name}: not one of the categories {allowed}"
                )
            cell += step
        cells = self.cells
        return [(node * cells + cell, 1) for node in path]


KIND = PlacesKind()
