"""Flag counters (seed 001's HIV+ admissions): one counter, +1 for every person record whose
boolean attribute is true. No constraints; the sensitivity is at least 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streamdp.engine.events import Contribution, Extractor, RejectedError
from streamdp.kinds.base import FloatArray, dense_projection_diagonal, refuse_clip

if TYPE_CHECKING:
    from streamdp.engine.config_reader import ConfigReader
    from streamdp.engine.spec import ConstraintSpec, CounterSpec, StreamSpec


class FlagKind:
    """The ``flag`` stream kind."""

    name = "flag"
    source_kind = "person"
    constraint_kinds: tuple[str, ...] = ()

    def parse_counters(self, reader: ConfigReader, table: dict[str, Any]) -> CounterSpec:
        from streamdp.engine.spec import CounterSpec

        reader.only(table, ("kind", "field", "name"), "counters")
        flag_field = reader.name(table.get("field"), "counters.field")
        counter = reader.name(table.get("name", flag_field), "counters.name")
        return CounterSpec(kind="flag", flag_field=flag_field, flag_counter=counter)

    def parse_constraints(
        self, reader: ConfigReader, table: dict[str, Any], counters: CounterSpec
    ) -> ConstraintSpec:  # pragma: no cover - no constraint kind to parse
        raise reader.fail("constraints.kind", "flag counters take no constraints")

    def counter_names(self, counters: CounterSpec) -> tuple[str, ...]:
        return (counters.flag_counter,)

    def check_contribution_bound(
        self,
        reader: ConfigReader,
        counters: CounterSpec,
        constraints: ConstraintSpec,
        sensitivity: int,
        over_sensitivity: str,
    ) -> None:
        refuse_clip(reader, over_sensitivity)

    def l2_squared_bound(
        self, counters: CounterSpec, constraints: ConstraintSpec, sensitivity: int
    ) -> int:
        """A flagged record adds 1 to the one counter."""
        return 1

    def extractor(self, spec: StreamSpec) -> Extractor:
        return FlagExtractor(spec)

    def project(self, spec: StreamSpec, values: FloatArray) -> FloatArray:  # pragma: no cover
        return values.copy()

    def projection_diagonal(self, spec: StreamSpec) -> FloatArray:
        return dense_projection_diagonal(self, spec)


class FlagExtractor(Extractor):
    """One counter: +1 when the boolean attribute ``field`` is true."""

    def __init__(self, spec: StreamSpec) -> None:
        self.field = spec.counters.flag_field

    def contribution(self, event: Mapping[str, Any]) -> Contribution:
        attrs = event.get("attributes")
        if not isinstance(attrs, dict):
            raise RejectedError("schema_violation", "field 'attributes' must be an object")
        value = attrs.get(self.field)
        if not isinstance(value, bool):
            raise RejectedError(
                "schema_violation", f"attributes.{self.field}: must be true or false"
            )
        return [(0, 1)] if value else []


KIND = FlagKind()
