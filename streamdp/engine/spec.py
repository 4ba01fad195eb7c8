"""Stream specifications: the validated configuration a release engine runs, as frozen data.

An :class:`EngineSpec` holds input *sources* (:class:`SourceSpec`: a topic or file label of one
event kind, with a per-source epsilon cap) and *streams* (:class:`StreamSpec`: one continual
release each: period, horizon N, epsilon, contribution bound (the sensitivity Delta), counters,
public constraints, mechanism, lateness, consistency schedule, what happens at the end of an
epoch). See DESIGN.md §2 and §5 and ``streamdp/examples/*.toml``.

Specs are built from TOML by :mod:`streamdp.engine.spec_loading` (``load_spec``,
``parse_spec``), which validates every field; epsilons are exact ``Decimal`` values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from streamdp.continual.definitions import Definition
from streamdp.engine.fingerprint import config_sha256
from streamdp.engine.privacy_unit import PrivacyUnit
from streamdp.engine.renamed_keys import with_first_format_keys

if TYPE_CHECKING:
    from streamdp.kinds.places_file import Places

SourceKind = Literal["order", "person"]
PeriodUnit = Literal["day", "month", "fixed"]
CounterKind = Literal["items", "attributes", "flag", "places"]
ConstraintKind = Literal["none", "combos", "hierarchy", "tree"]
EpochEnd = Literal["roll", "stop"]
OverSensitivity = Literal["reject", "clip"]
Mechanism = Literal["fda", "binary", "naive", "kary_digits", "kary_gls", "blt"]
#: Mechanisms whose releases are decoded from noise known ahead (k-ary) or from a matrix
#: factorization (BLT): with constraints, they are projected at publication by a dense matrix.
DECODED_MECHANISMS = ("kary_digits", "kary_gls", "blt")
Objective = Literal["total", "minimax", "count"]


@dataclass(frozen=True)
class PeriodSpec:
    """How event time maps to periods.

    ``unit`` "day"/"month": calendar periods in ``timezone`` starting at local midnight of the
    date ``start`` (for months, ``start`` must be the first of a month). ``unit`` "fixed":
    periods of ``length_seconds`` starting at the instant ``start`` (RFC 3339 with offset).
    """

    unit: PeriodUnit
    start: str
    timezone: str = "UTC"
    length_seconds: int = 0


@dataclass(frozen=True)
class Attribute:
    """One categorical attribute of a person record and its allowed categories (in order)."""

    name: str
    categories: tuple[str, ...]


@dataclass(frozen=True)
class CounterSpec:
    """What a stream counts.

    - ``items``: one counter per item; an order adds its quantity of each item.
    - ``attributes``: census-style; counters are the total, every one-way marginal and every
      cell of the attributes' cross product (layout: see :attr:`names`). One record adds 1 to
      the total, to one category of each attribute and to one cell: k + 2 counters.
    - ``flag``: one counter named ``flag_counter``, +1 for every record whose boolean
      attribute ``flag_field`` is true.
    - ``places``: one counter per place of ``places`` (a public hierarchy), times the cells of
      ``attributes`` when given; a record names its leaf place in ``attributes.<place_field>``
      and adds 1 to it and every place above it (:mod:`streamdp.kinds.places`); with
      ``level_weights`` each level gets its own share of the budget.

    ``attributes`` with ``attribute_weights``: the total, each attribute's marginal and the cells
    get their own shares of the budget (:mod:`streamdp.engine.budget_groups`).
    """

    kind: CounterKind
    items: tuple[str, ...] = ()
    attributes: tuple[Attribute, ...] = ()
    flag_field: str = ""
    flag_counter: str = ""
    places: Places | None = None
    place_field: str = ""
    # places: each level's relative share of the stream's budget, root level first (issue
    # 29; :mod:`streamdp.engine.budget_groups`); empty: one budget for every counter
    level_weights: tuple[Decimal, ...] = ()
    # attributes: the relative shares of the total, each attribute's marginal (in attribute
    # order) and the cells (issue 29; seed 002); empty: one budget for every counter
    attribute_weights: tuple[Decimal, ...] = ()

    @cached_property
    def names(self) -> tuple[str, ...]:
        """Counter names in vector order, as the kind lays them out (:mod:`streamdp.kinds`;
        computed once: a census stream has hundreds).

        attributes: ``total``, then ``attr=cat`` for every attribute in order, then the cells
        ``a1=c1,a2=c2,...`` in row-major order over the attributes' categories.
        """
        from streamdp.kinds import stream_kind

        return stream_kind(self.kind).counter_names(self)

    @property
    def width(self) -> int:
        """Number of counters."""
        return len(self.names)


@dataclass(frozen=True)
class ConstraintSpec:
    """Public linear constraints the consistent revisions respect.

    ``combos``: every period's item vector lies in the span of the combo vectors (seed 004);
    ``combos`` holds (name, quantities in item order). ``orders_must_be_combos``: an order whose
    item vector is not exactly one combo is rejected (reason ``not_a_combo``).
    ``hierarchy``: total = sum of each attribute's marginal = sum of cells (seed 000).
    ``tree``: every place's count = the sum of its children's, in every cell (seed 003).
    """

    kind: ConstraintKind = "none"
    combos: tuple[tuple[str, tuple[int, ...]], ...] = ()
    orders_must_be_combos: bool = False


@dataclass(frozen=True)
class StreamAbout:
    """What a stream counts, in words for its readers: a ``title``, a plain ``description`` and
    the ``unit`` of its counts (e.g. "admissions"). Optional and public: every release record
    carries them, and the feed page heads the stream with them. Wording only: changing it
    changes no count, so it is left out of the configuration fingerprint
    (:data:`PRESENTATION_KEYS`)."""

    title: str | None = None
    description: str | None = None
    unit: str | None = None

    def fields(self) -> dict[str, str]:
        """The declared ones, as release-record fields (absent ones left out)."""
        named = {"title": self.title, "description": self.description, "unit": self.unit}
        return {key: value for key, value in named.items() if value is not None}


#: The keys of a stream's table that only word it (:class:`StreamAbout`): a snapshot restores
#: under a configuration that differs from its own in these alone.
PRESENTATION_KEYS = ("title", "description", "unit")


@dataclass(frozen=True)
class ConsistencySpec:
    """When consistent revisions are published: after every ``every_periods`` closed periods
    (0 = never on a count) and/or when an epoch ends (``at_epoch_end``). With
    ``nonnegative_integers`` (places streams on their tree) each revised period also carries
    non-negative integer estimates, post-processed from its consistent values
    (:mod:`streamdp.consistency.nonnegative`)."""

    every_periods: int = 0
    at_epoch_end: bool = True
    nonnegative_integers: bool = False


@dataclass(frozen=True)
class StreamSpec:
    """One continual release (DESIGN §2, §5). ``epsilon`` is exact (Decimal)."""

    name: str
    source: str
    epsilon: Decimal
    sensitivity: int
    horizon: int
    period: PeriodSpec
    counters: CounterSpec
    constraints: ConstraintSpec = field(default_factory=ConstraintSpec)
    mechanism: Mechanism = "fda"
    objective: Objective = "total"
    branching: int | None = None  # k of the k-ary strategies (None: optimised for the horizon)
    allowed_lateness_seconds: float = 0.0
    consistency: ConsistencySpec = field(default_factory=ConsistencySpec)
    on_epoch_end: EpochEnd = "roll"
    over_sensitivity: OverSensitivity = "reject"
    max_future_periods: int = 0
    about: StreamAbout = field(default_factory=StreamAbout)
    # rho-zCDP (issue 27): ``rho`` per epoch (exact), the ``delta`` its (epsilon, delta) bound
    # is stated at, and the squared L2 bound of one event (from the kind). None for pure-DP
    # streams. Under zCDP ``epsilon`` is that (epsilon, delta) bound, for reports only.
    rho: Decimal | None = None
    delta: Decimal | None = None
    l2_squared: int = 0
    # the privacy unit (issue 28): with one, ``l2_squared`` above is the unit-level bound
    # (M^2 times the event's) and :attr:`noise_sensitivity` the L1 one; None protects one event
    privacy_unit: PrivacyUnit | None = None

    @property
    def unit_multiplier(self) -> int:
        """``M``: the most records one protected unit adds to an epoch (1: the unit is one
        event)."""
        return 1 if self.privacy_unit is None else self.privacy_unit.multiplier

    @property
    def noise_sensitivity(self) -> int:
        """The L1 sensitivity the noise is calibrated on: ``sensitivity`` (one event's bound)
        times :attr:`unit_multiplier` (DESIGN §2 "Privacy unit")."""
        return self.sensitivity * self.unit_multiplier

    @property
    def protects(self) -> str:
        """Per what the guarantee holds, in words for records, status and the feed."""
        if self.privacy_unit is None:
            return "event"
        return f"{self.privacy_unit.field} per epoch"

    @property
    def projects_at_publication(self) -> bool:
        """A decoded stream whose exact counts always satisfy its constraints (combos: every
        counted order lies in their span; a hierarchy) projects each release's noise onto them
        when it publishes it, each counter's standard deviations scaled by ``sqrt(P_jj)``; a
        decoded ``tree`` stream projects in its revisions instead."""
        return self.mechanism in DECODED_MECHANISMS and self.constraints.kind in (
            "hierarchy",
            "combos",
        )

    @property
    def definition(self) -> Definition:
        """``"zcdp"`` for a rho-zCDP stream, ``"pure"`` for an epsilon-DP one."""
        return "pure" if self.rho is None else "zcdp"

    @property
    def budget(self) -> Decimal:
        """What the stream spends per epoch in its definition's unit: rho or epsilon."""
        return self.epsilon if self.rho is None else self.rho


@dataclass(frozen=True)
class SourceSpec:
    """An input source: its topic (or file label), the event kind it carries, and its cap:
    epsilon (pure DP) or rho (zCDP), which the budgets of the streams reading it add up to."""

    name: str
    topic: str
    kind: SourceKind
    epsilon_cap: Decimal | None
    # a zCDP source caps rho instead (issue 27); exactly one of the two caps is set
    rho_cap: Decimal | None = None

    @property
    def definition(self) -> Definition:
        """The privacy definition of every stream reading this source."""
        return "pure" if self.rho_cap is None else "zcdp"

    @property
    def cap(self) -> Decimal:
        """The cap in the definition's unit: rho for zCDP sources, epsilon otherwise."""
        cap = self.epsilon_cap if self.rho_cap is None else self.rho_cap
        assert cap is not None  # the loader sets exactly one
        return cap


@dataclass(frozen=True)
class EngineSpec:
    """A whole configuration: sources and streams by name (insertion order kept)."""

    sources: Mapping[str, SourceSpec]
    streams: Mapping[str, StreamSpec]
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def fingerprint(self) -> str:
        """SHA-256 of the canonical configuration (snapshots refuse a different spec), its
        wording (:data:`PRESENTATION_KEYS`) left out."""
        return config_sha256(without_presentation(self.raw))

    def fingerprints(self) -> tuple[str, str]:
        """:meth:`fingerprint` and the fingerprint of the same configuration written with the
        first format's key names (:data:`~streamdp.engine.renamed_keys.RENAMED_KEYS`): a state
        stored before the keys were renamed restores once the operator renames them, and under
        no other configuration."""
        legacy = with_first_format_keys(without_presentation(self.raw))
        if legacy is None:
            return self.fingerprint(), self.fingerprint()
        return self.fingerprint(), config_sha256(legacy)

    def source_of_topic(self, topic: str) -> SourceSpec | None:
        """The source reading ``topic`` or named ``topic``, if any."""
        for source in self.sources.values():
            if topic in (source.topic, source.name):
                return source
        return None


def without_presentation(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` with every stream's :data:`PRESENTATION_KEYS` removed (a copy; ``raw`` kept)."""
    out = dict(raw)
    streams = raw.get("streams")
    if isinstance(streams, Mapping):
        out["streams"] = {
            name: (
                {k: v for k, v in table.items() if k not in PRESENTATION_KEYS}
                if isinstance(table, Mapping)
                else table
            )
            for name, table in streams.items()
        }
    return out
