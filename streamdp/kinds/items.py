"""Item counters (seed 004's restaurant): one counter per item; an order adds its quantity of
each item. Constraint ``combos``: every period's item vector lies in the span of the combo
vectors; with ``orders_must_be_combos`` an order must be exactly one combo, without it an
order must lie in that span (a sum of combos, checked exactly), so the constraint holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from streamdp.consistency.combos import integer_span_checks, project_onto_combo_span
from streamdp.engine.events import (
    MAX_QUANTITY,
    Contribution,
    Extractor,
    RejectedError,
    quoted,
)
from streamdp.kinds.base import FloatArray, dense_projection_diagonal

if TYPE_CHECKING:
    from streamdp.engine.config_reader import ConfigReader
    from streamdp.engine.spec import ConstraintSpec, CounterSpec, StreamSpec


class ItemsKind:
    """The ``items`` stream kind."""

    name = "items"
    source_kind = "order"
    constraint_kinds: tuple[str, ...] = ("combos",)

    def parse_counters(self, reader: ConfigReader, table: dict[str, Any]) -> CounterSpec:
        from streamdp.engine.spec import CounterSpec

        reader.only(table, ("kind", "items"), "counters")
        items = table.get("items")
        if not isinstance(items, list) or not items:
            raise reader.fail("counters.items", "must be a non-empty list of item names")
        names = tuple(reader.name(i, "counters.items") for i in items)
        if len(set(names)) != len(names):
            raise reader.fail("counters.items", "item names must be distinct")
        return CounterSpec(kind="items", items=names)

    def parse_constraints(
        self, reader: ConfigReader, table: dict[str, Any], counters: CounterSpec
    ) -> ConstraintSpec:
        from streamdp.engine.spec import ConstraintSpec

        reader.only(table, ("kind", "combos", "orders_must_be_combos"), "constraints")
        combos_raw = reader.table(table.get("combos"), "constraints.combos")
        if not combos_raw:
            raise reader.fail(
                "constraints.combos", "list at least one combo, e.g. meal = { cola = 1 }"
            )
        combos: list[tuple[str, tuple[int, ...]]] = []
        for combo_name, content in combos_raw.items():
            where = f"constraints.combos.{combo_name}"
            reader.name(combo_name, where)
            quantities = reader.table(content, where)
            vector = [0] * len(counters.items)
            for item, quantity in quantities.items():
                if item not in counters.items:
                    raise reader.fail(
                        f"{where}.{item}",
                        f"unknown item; the stream counts {', '.join(counters.items)}",
                    )
                vector[counters.items.index(item)] = reader.integer(quantity, f"{where}.{item}", 1)
            combos.append((combo_name, tuple(vector)))
        must = reader.boolean(
            table.get("orders_must_be_combos", True), "constraints.orders_must_be_combos"
        )
        return ConstraintSpec(kind="combos", combos=tuple(combos), orders_must_be_combos=must)

    def counter_names(self, counters: CounterSpec) -> tuple[str, ...]:
        return counters.items

    def check_contribution_bound(
        self,
        reader: ConfigReader,
        counters: CounterSpec,
        constraints: ConstraintSpec,
        sensitivity: int,
        over_sensitivity: str,
    ) -> None:
        if constraints.kind != "combos":
            return
        largest = max(sum(q) for _, q in constraints.combos)
        if constraints.orders_must_be_combos and sensitivity < largest:
            raise reader.fail(
                "sensitivity",
                f"is {sensitivity}, but the largest combo holds {largest} units; "
                f"set sensitivity >= {largest}",
            )
        if over_sensitivity == "clip":
            raise reader.fail(
                "over_sensitivity",
                "'clip' would turn orders into non-combos and break the combo constraint; "
                "use 'reject'",
            )

    def l2_squared_bound(
        self, counters: CounterSpec, constraints: ConstraintSpec, sensitivity: int
    ) -> int:
        """Orders that must be combos: the largest combo's sum of squared quantities; else an
        order of at most ``sensitivity`` units (L1, enforced or clipped), whose squared L2 norm
        is largest with every unit on one item: ``sensitivity^2``."""
        if constraints.kind == "combos" and constraints.orders_must_be_combos:
            return max(sum(q * q for q in quantities) for _, quantities in constraints.combos)
        return sensitivity * sensitivity

    def extractor(self, spec: StreamSpec) -> Extractor:
        return ItemExtractor(spec)

    def project(self, spec: StreamSpec, values: FloatArray) -> FloatArray:
        combos = np.array([vector for _, vector in spec.constraints.combos], dtype=np.float64)
        return project_onto_combo_span(values, combos)

    def projection_diagonal(self, spec: StreamSpec) -> FloatArray:
        return dense_projection_diagonal(self, spec)


class ItemExtractor(Extractor):
    """Orders: ``items`` maps item name to a non-negative integer quantity."""

    def __init__(self, spec: StreamSpec) -> None:
        self.index = {name: i for i, name in enumerate(spec.counters.items)}
        self.allowed = ", ".join(spec.counters.items)
        self.sensitivity = spec.sensitivity
        self.clip = spec.over_sensitivity == "clip"
        constraints = spec.constraints
        # orders that need not be one combo must still lie in the combos' span, or the public
        # constraint the revisions project onto would not hold (and would bias them)
        self.span_checks = (
            integer_span_checks([vector for _, vector in constraints.combos])
            if constraints.kind == "combos" and not constraints.orders_must_be_combos
            else []
        )
        self.span_names = ", ".join(name for name, _ in constraints.combos)
        combos = constraints.combos if constraints.orders_must_be_combos else ()
        self.combos = {
            tuple((i, q) for i, q in enumerate(vector) if q): name for name, vector in combos
        }
        self.combo_names = ", ".join(name for name, _ in combos)
        # an order that is exactly a combo, written without zero quantities: its contribution
        # by one lookup ({item: quantity} pairs as a set; the spec keeps combos within the
        # sensitivity)
        self.exact_combos: dict[frozenset[tuple[str, int]], Contribution] = {
            frozenset((spec.counters.items[i], q) for i, q in pairs): pairs for pairs in self.combos
        }

    def contribution(self, event: Mapping[str, Any]) -> Contribution:
        items = event.get("items")
        if self.exact_combos and type(items) is dict:
            try:
                hit = self.exact_combos.get(frozenset(items.items()))
            except TypeError:  # an unhashable quantity: refused below
                hit = None
            if hit is not None:
                # True == 1 and 1.0 == 1 in the lookup: only integer quantities may pass
                for quantity in items.values():
                    if type(quantity) is not int:
                        break
                else:
                    return hit
        return self._checked(items)

    def _checked(self, items: Any) -> Contribution:
        if not isinstance(items, dict) or not items:
            raise RejectedError(
                "schema_violation", "field 'items' must be a non-empty object {item: quantity}"
            )
        out: list[tuple[int, int]] = []
        total = 0
        index = self.index
        for name, quantity in items.items():
            i = index.get(name)
            if i is None:
                raise RejectedError(
                    "unknown_item", f"items: unknown item {quoted(name)}; allowed: {self.allowed}"
                )
            if type(quantity) is not int or not 0 <= quantity <= MAX_QUANTITY:
                raise RejectedError(
                    "invalid_quantity",
                    f"items.{name}: quantity must be an integer from 0 to {MAX_QUANTITY}",
                )
            if quantity:
                out.append((i, quantity))
                total += quantity
        out.sort()
        if total > self.sensitivity:
            if not self.clip:
                raise RejectedError(
                    "contribution_over_sensitivity",
                    f"items: the order's total quantity exceeds the stream's bound "
                    f"sensitivity = {self.sensitivity}",
                )
            clipped: list[tuple[int, int]] = []
            room = self.sensitivity
            for i, q in out:
                take = min(q, room)
                if take:
                    clipped.append((i, take))
                room -= take
            out = clipped
        if self.combos and tuple(out) not in self.combos:
            raise RejectedError(
                "not_a_combo",
                f"items: the order is not exactly one of the combos {self.combo_names}",
            )
        for check in self.span_checks:
            if sum(check[i] * q for i, q in out):
                raise RejectedError(
                    "not_a_combo",
                    f"items: the order is no combination of the combos {self.span_names} "
                    "(orders_must_be_combos = false admits sums of combos, not other orders)",
                )
        return out


KIND = ItemsKind()
