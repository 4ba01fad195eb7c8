"""What a stream kind is: everything the system knows about one kind of counters, in one place.

A stream kind (``items``, ``attributes``, ``flag``, ``places``; :mod:`streamdp.kinds`) says which
source events it reads, how its ``counters`` and ``constraints`` tables are parsed, the names of its
counters in vector order, the least sensitivity that admits one legitimate event, how one event
becomes counter increments (its :class:`~streamdp.engine.events.Extractor`), and how a vector of
noisy counter values is projected onto its public constraints. Adding a kind is one module that
implements :class:`StreamKind`, one line in :data:`streamdp.kinds.KINDS`, its input schema in
``schemas/`` and its tests (docs/architecture.md, "Adding a stream kind").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from decimal import Decimal

    from streamdp.engine.config_reader import ConfigReader
    from streamdp.engine.events import Extractor
    from streamdp.engine.spec import ConstraintSpec, CounterSpec, StreamSpec

FloatArray = npt.NDArray[np.float64]


class StreamKind(Protocol):
    """One kind of counters (see the module docstring)."""

    #: the ``counters.kind`` value that selects it
    name: str
    #: the source event kind it counts (``order`` or ``person``)
    source_kind: str
    #: the ``constraints.kind`` values it supports besides ``none``
    constraint_kinds: tuple[str, ...]

    def parse_counters(self, reader: ConfigReader, table: dict[str, Any]) -> CounterSpec:
        """The ``counters`` table (its ``kind`` already read) as a :class:`CounterSpec`."""
        ...

    def parse_constraints(
        self, reader: ConfigReader, table: dict[str, Any], counters: CounterSpec
    ) -> ConstraintSpec:
        """The ``constraints`` table of a kind in :attr:`constraint_kinds`."""
        ...

    def counter_names(self, counters: CounterSpec) -> tuple[str, ...]:
        """Counter names in vector order (the order of every release and node vector)."""
        ...

    def check_contribution_bound(
        self,
        reader: ConfigReader,
        counters: CounterSpec,
        constraints: ConstraintSpec,
        sensitivity: int,
        over_sensitivity: str,
    ) -> None:
        """Refuse a sensitivity below one legitimate event's contribution, and an
        ``over_sensitivity`` the kind cannot honour."""
        ...

    def l2_squared_bound(
        self, counters: CounterSpec, constraints: ConstraintSpec, sensitivity: int
    ) -> int:
        """The most one admitted event can add to the squared L2 norm of the stream's
        counter vector in its period (an integer: contributions are integers), given the L1
        bound ``sensitivity`` the extractor enforces; zCDP streams calibrate on it."""
        ...

    def extractor(self, spec: StreamSpec) -> Extractor:
        """The stream's event-to-increments function."""
        ...

    def project(self, spec: StreamSpec, values: FloatArray) -> FloatArray:
        """Every row of ``values`` (shape (n, width)) projected orthogonally onto the stream's
        constraint subspace (never called for ``constraints.kind == 'none'``)."""
        ...

    def projection_diagonal(self, spec: StreamSpec) -> FloatArray:
        """``P_jj`` of :meth:`project` (shape (width,)): how much of a counter's noise
        variance its projection keeps (:func:`dense_projection_diagonal` for a small stream;
        a kind with many counters computes it without the dense matrix)."""
        ...


@runtime_checkable
class GroupedKind(Protocol):
    """A kind whose counters fall into budget groups a spec may weight (issue 29; seed 002):
    contiguous ranges of the counter vector to which one event adds exactly one increment
    each (a places stream's levels; a census stream's total, each attribute's marginal and its
    cells). :mod:`streamdp.engine.budget_groups` gives each group its share of the budget."""

    def budget_group_ranges(self, counters: CounterSpec) -> tuple[tuple[str, int, int], ...]:
        """``(name, start, stop)`` of every group in counter order, covering every counter;
        empty when the spec weights none."""
        ...

    def group_weights(self, counters: CounterSpec) -> tuple[Decimal, ...]:
        """The spec's weight of every group, in the order of :meth:`budget_group_ranges`."""
        ...

    def project_by_group(
        self, spec: StreamSpec, values: FloatArray, group_variances: FloatArray
    ) -> FloatArray:
        """Every row of ``values`` (shape (n, width)) projected onto the constraints by exact
        GLS, each group's counters weighted by that group's noise variance in that row
        (``group_variances``, shape (>= n, groups))."""
        ...

    def projected_variances_by_group(
        self, spec: StreamSpec, group_variances: FloatArray
    ) -> FloatArray:
        """The noise variance of every counter after :meth:`project_by_group`, shape
        (n, width), from the groups' node variances (n, groups); exact."""
        ...


def dense_projection_diagonal(kind: StreamKind, spec: StreamSpec) -> FloatArray:
    """``P_jj`` of ``kind``'s projection from its dense ``width x width`` matrix (the identity
    for a stream without constraints)."""
    width = spec.counters.width
    if spec.constraints.kind == "none":
        return np.ones(width)
    return np.clip(np.diag(kind.project(spec, np.eye(width))), 0.0, 1.0)


def refuse_clip(reader: ConfigReader, over_sensitivity: str) -> None:
    """``over_sensitivity = 'clip'`` is defined for item counters only."""
    if over_sensitivity == "clip":
        raise reader.fail("over_sensitivity", "'clip' applies to item counters only; use 'reject'")
