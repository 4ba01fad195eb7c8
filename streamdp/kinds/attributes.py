"""Census-style attribute counters (seed 000): the total, every one-way marginal and every cell
of the attributes' cross product. One person record adds 1 to the total, to one category of
each attribute and to one cell: k + 2 counters, so the sensitivity is at least k + 2.
Constraint ``hierarchy``: total = sum of each attribute's marginal = sum of the cells.

The layout (:func:`census_layout`) is written once here and read by the counter names, the
extractor and the projection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np

from streamdp.consistency.census import (
    CensusVariances,
    census_exact,
    census_projected_variances,
)
from streamdp.engine.events import Contribution, Extractor, RejectedError
from streamdp.kinds.base import FloatArray, dense_projection_diagonal, refuse_clip

if TYPE_CHECKING:
    from streamdp.engine.config_reader import ConfigReader
    from streamdp.engine.spec import Attribute, ConstraintSpec, CounterSpec, StreamSpec

#: Most cells of an attribute cross product.
MAX_CELLS = 1_000_000


@dataclass(frozen=True)
class CensusLayout:
    """Where each counter of an attributes stream sits in the counter vector: index 0 is the
    total, then each attribute's categories (``marginal_offsets[i]`` is the first), then the
    cells in row-major order over the attributes (``cell_offset`` is the first; a category's
    ``strides[i] * j`` moves to its cells)."""

    sizes: tuple[int, ...]
    marginal_offsets: tuple[int, ...]
    cell_offset: int
    strides: tuple[int, ...]


def census_layout(attributes: Sequence[Attribute]) -> CensusLayout:
    """The counter layout of ``attributes`` (see :class:`CensusLayout`)."""
    sizes = tuple(len(a.categories) for a in attributes)
    offsets = []
    offset = 1
    for size in sizes:
        offsets.append(offset)
        offset += size
    strides = [1] * len(sizes)
    for i in range(len(sizes) - 2, -1, -1):
        strides[i] = strides[i + 1] * sizes[i + 1]
    return CensusLayout(sizes, tuple(offsets), offset, tuple(strides))


def cell_names(attributes: Sequence[Attribute]) -> list[str]:
    """The cells of the attributes' cross product in row-major order (``a=x,b=y``); one empty
    name when there are no attributes."""
    cells: list[str] = [""]
    for attribute in attributes:
        cells = [
            (f"{prefix}," if prefix else "") + f"{attribute.name}={c}"
            for prefix in cells
            for c in attribute.categories
        ]
    return cells


def read_attributes(reader: ConfigReader, raw: Any, *, minimum: int) -> tuple[Attribute, ...]:
    """``counters.attributes``: an array of ``{ name, categories }`` tables, at least
    ``minimum`` of them, names distinct, each with two or more distinct categories."""
    from streamdp.engine.spec import Attribute

    if not isinstance(raw, list) or not raw:
        raise reader.fail(
            "counters.attributes",
            "must be a non-empty array of tables like "
            "{ name = 'sex', categories = ['female', 'male'] }",
        )
    attributes: list[Attribute] = []
    for i, entry in enumerate(raw):
        where = f"counters.attributes[{i}]"
        entry_table = reader.table(entry, where)
        reader.only(entry_table, ("name", "categories"), where)
        attr_name = reader.name(entry_table.get("name"), f"{where}.name")
        categories = entry_table.get("categories")
        if not isinstance(categories, list) or len(categories) < 2:
            raise reader.fail(f"{where}.categories", "must list at least two category names")
        cats = tuple(reader.name(c, f"{where}.categories") for c in categories)
        if len(set(cats)) != len(cats):
            raise reader.fail(f"{where}.categories", "category names must be distinct")
        attributes.append(Attribute(attr_name, cats))
    if len({a.name for a in attributes}) != len(attributes):
        raise reader.fail("counters.attributes", "attribute names must be distinct")
    if len(attributes) < minimum:
        # one attribute's cells are its one-way marginal: both would publish under the same
        # counter names (and release keys), one overwriting the other downstream
        raise reader.fail(
            "counters.attributes",
            "needs at least two attributes: with one, its cells are its one-way marginal "
            "and would be released twice under the same names",
        )
    return tuple(attributes)


class AttributesKind:
    """The ``attributes`` stream kind."""

    name = "attributes"
    source_kind = "person"
    constraint_kinds: tuple[str, ...] = ("hierarchy",)

    def parse_counters(self, reader: ConfigReader, table: dict[str, Any]) -> CounterSpec:
        from streamdp.engine.spec import CounterSpec

        reader.only(table, ("kind", "attributes", "attribute_weights"), "counters")
        attributes = read_attributes(reader, table.get("attributes"), minimum=2)
        cells = 1
        for attribute in attributes:
            cells *= len(attribute.categories)
        if cells > MAX_CELLS:
            raise reader.fail(
                "counters.attributes", f"the cross product has {cells} cells; at most 10^6"
            )
        return CounterSpec(
            kind="attributes",
            attributes=tuple(attributes),
            attribute_weights=_attribute_weights(
                reader, table.get("attribute_weights"), attributes
            ),
        )

    def parse_constraints(
        self, reader: ConfigReader, table: dict[str, Any], counters: CounterSpec
    ) -> ConstraintSpec:
        from streamdp.engine.spec import ConstraintSpec

        reader.only(table, ("kind",), "constraints")
        return ConstraintSpec(kind="hierarchy")

    def counter_names(self, counters: CounterSpec) -> tuple[str, ...]:
        names = ["total"]
        for attribute in counters.attributes:
            names.extend(f"{attribute.name}={c}" for c in attribute.categories)
        names.extend(cell_names(counters.attributes))
        return tuple(names)

    def check_contribution_bound(
        self,
        reader: ConfigReader,
        counters: CounterSpec,
        constraints: ConstraintSpec,
        sensitivity: int,
        over_sensitivity: str,
    ) -> None:
        # Delta must admit a single legitimate event, otherwise every event would be rejected
        need = len(counters.attributes) + 2
        if sensitivity < need:
            raise reader.fail(
                "sensitivity",
                f"is {sensitivity}, but one record with {len(counters.attributes)} attributes "
                f"changes {need} counters (k + 2: total, one category per attribute, one cell); "
                f"set sensitivity = {need}",
            )
        refuse_clip(reader, over_sensitivity)

    def l2_squared_bound(
        self, counters: CounterSpec, constraints: ConstraintSpec, sensitivity: int
    ) -> int:
        """A record adds 1 to k + 2 counters (total, one category per attribute, one cell):
        squared L2 norm k + 2, where its L1 norm, and so the sensitivity, is k + 2 too."""
        return len(counters.attributes) + 2

    def extractor(self, spec: StreamSpec) -> Extractor:
        return AttributeExtractor(spec)

    def project(self, spec: StreamSpec, values: FloatArray) -> FloatArray:
        return _project_census(census_layout(spec.counters.attributes), values, None)

    def projection_diagonal(self, spec: StreamSpec) -> FloatArray:
        return dense_projection_diagonal(self, spec)

    # budget groups (GroupedKind): the total, each attribute's marginal, the cells
    def budget_group_ranges(self, counters: CounterSpec) -> tuple[tuple[str, int, int], ...]:
        if not counters.attribute_weights:
            return ()
        layout = census_layout(counters.attributes)
        marginals = tuple(
            (attribute.name, offset, offset + size)
            for attribute, offset, size in zip(
                counters.attributes, layout.marginal_offsets, layout.sizes, strict=True
            )
        )
        return (("total", 0, 1), *marginals, ("cells", layout.cell_offset, counters.width))

    def group_weights(self, counters: CounterSpec) -> tuple[Decimal, ...]:
        return counters.attribute_weights

    def project_by_group(
        self, spec: StreamSpec, values: FloatArray, group_variances: FloatArray
    ) -> FloatArray:
        """Row by row: the census closed form under that row's group variances (the nodes of
        a stream differ in scale, so in their variances)."""
        layout = census_layout(spec.counters.attributes)
        k = len(layout.sizes)
        out = np.empty_like(values)
        for row in range(values.shape[0]):
            v = group_variances[row]
            variances = CensusVariances(
                total=float(v[0]),
                marginals=tuple(float(x) for x in v[1 : k + 1]),
                cells=float(v[k + 1]),
            )
            out[row : row + 1] = _project_census(layout, values[row : row + 1], variances)
        return out

    def projected_variances_by_group(
        self, spec: StreamSpec, group_variances: FloatArray
    ) -> FloatArray:
        layout = census_layout(spec.counters.attributes)
        k = len(layout.sizes)
        v = np.asarray(group_variances, dtype=np.float64)
        total, marginals, cells = census_projected_variances(
            layout.sizes, v[:, 0], v[:, 1 : k + 1], v[:, k + 1]
        )
        out = np.empty((v.shape[0], spec.counters.width))
        out[:, 0] = total
        for i, (offset, size) in enumerate(zip(layout.marginal_offsets, layout.sizes, strict=True)):
            out[:, offset : offset + size] = marginals[:, i : i + 1]
        out[:, layout.cell_offset :] = cells[:, None]
        return out


def _project_census(
    layout: CensusLayout, values: FloatArray, variances: CensusVariances | None
) -> FloatArray:
    """Rows of census counter vectors projected onto the hierarchy (GLS under ``variances``;
    None: orthogonally), by the closed form of :func:`census_exact`."""
    n = values.shape[0]
    total = values[:, 0]
    marginals = [
        values[:, offset : offset + size]
        for offset, size in zip(layout.marginal_offsets, layout.sizes, strict=True)
    ]
    cells = values[:, layout.cell_offset :].reshape((n, *layout.sizes))
    t_hat, m_hat, c_hat = census_exact(total, marginals, cells, variances)
    out = np.empty_like(values)
    out[:, 0] = t_hat
    for offset, size, m in zip(layout.marginal_offsets, layout.sizes, m_hat, strict=True):
        out[:, offset : offset + size] = m
    out[:, layout.cell_offset :] = np.asarray(c_hat).reshape(n, -1)
    return out


class AttributeExtractor(Extractor):
    """Census-style person records: total + one category per attribute + one cell (k + 2)."""

    def __init__(self, spec: StreamSpec) -> None:
        attributes = spec.counters.attributes
        layout = census_layout(attributes)
        self.names = [a.name for a in attributes]
        # per attribute: category -> (its marginal counter, its step within the cells)
        self.lookup: list[dict[str, tuple[int, int]]] = [
            {c: (offset + j, j * stride) for j, c in enumerate(attribute.categories)}
            for attribute, offset, stride in zip(
                attributes, layout.marginal_offsets, layout.strides, strict=True
            )
        ]
        self.cell_offset = layout.cell_offset
        self.allowed = [", ".join(a.categories) for a in attributes]
        self.sensitivity = spec.sensitivity

    def contribution(self, event: Mapping[str, Any]) -> Contribution:
        attrs = event.get("attributes")
        if not isinstance(attrs, dict):
            raise RejectedError("schema_violation", "field 'attributes' must be an object")
        out: list[tuple[int, int]] = [(0, 1)]
        cell = self.cell_offset
        for name, table, allowed in zip(self.names, self.lookup, self.allowed, strict=True):
            value = attrs.get(name)
            if value is None:
                raise RejectedError("schema_violation", f"attributes.{name}: missing")
            hit = table.get(value) if isinstance(value, str) else None
            if hit is None:
                raise RejectedError(
                    "unknown_category", f"attributes.{name}: not one of the categories {allowed}"
                )
            out.append((hit[0], 1))
            cell += hit[1]
        out.append((cell, 1))
        return out


KIND = AttributesKind()


def _attribute_weights(
    reader: ConfigReader, written: Any, attributes: Sequence[Attribute]
) -> tuple[Decimal, ...]:
    """``counters.attribute_weights``: a table with one positive number for ``total``, for
    every attribute (by name: its marginal) and for ``cells``; their ratios are the groups'
    shares of the budget. Returned in counter order (total, attributes, cells); absent: ``()``."""
    if written is None:
        return ()
    names = ["total", *(a.name for a in attributes), "cells"]
    example = "{ " + ", ".join(f"{name} = 1" for name in names) + " }"
    clash = [a.name for a in attributes if a.name in ("total", "cells")]
    if clash:
        raise reader.fail(
            "counters.attribute_weights",
            f"the attribute {clash[0]!r} has the name of a group (total, cells); rename it to "
            "weigh the groups",
        )
    table = reader.table(written, "counters.attribute_weights")
    if set(table) != set(names):
        missing = [name for name in names if name not in table]
        unknown = [key for key in table if key not in names]
        problem = (f"missing {', '.join(missing)}" if missing else "") + (
            ("; " if missing else "") + f"unknown {', '.join(unknown)}" if unknown else ""
        )
        raise reader.fail(
            "counters.attribute_weights",
            f"must give one weight to the total, each attribute and the cells, e.g. {example} "
            f"({problem})",
        )
    return tuple(
        reader.epsilon(table[name], f"counters.attribute_weights.{name}") for name in names
    )
