"""One counter's release at a period's close, and what the releases of one close share.

A close writes one record per counter (a places stream: up to millions); each holds only its
own values and one :class:`ReleaseContext` shared by the close, which also writes the JSON
text of the shared fields once (see :meth:`ReleaseRecord.to_json`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from streamdp.engine import json_text
from streamdp.engine.record_schema import SCHEMA_VERSION, RecordKind

if TYPE_CHECKING:
    from streamdp.engine.counter_fields import CounterFields


@dataclass(frozen=True, slots=True)
class ReleaseContext:
    """What every release of one stream's period close shares: the period, the stream's budget,
    mechanism and noise, its optional fields. Made once per close and held by each of its
    :class:`ReleaseRecord`; the JSON text of these fields is written once, here."""

    stream: str
    epoch: int
    period: int
    period_start: str
    period_end: str
    epsilon: float
    sensitivity: int
    horizon: int
    mechanism: str
    objective: str
    noise: str
    noise_secure: bool
    # the stream's wording from its spec (``title``, ``description``, ``unit``; the declared
    # ones only, :class:`streamdp.engine.spec.StreamAbout`) and, for a zCDP stream, its
    # privacy fields (stream_releases.zcdp_fields): optional fields, present when they apply
    optional_fields: Mapping[str, object] = field(default_factory=dict)
    # the stream's per-counter optional fields (budget group, place, cell), shared by every
    # release of the stream and asked for a counter's when serialised (CounterFields)
    counter_fields: CounterFields | None = None
    #: the record's JSON text between its own values (see :meth:`ReleaseRecord.to_json`)
    _text: tuple[str, str, str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        clash = set(self.optional_fields) & set(_RELEASE_FIELDS)
        if clash:
            raise ValueError(f"optional release fields {sorted(clash)} shadow required ones")
        before_counter = ',"stream":' + json_text.string(self.stream) + ',"counter":'
        before_count = (
            f',"epoch":{self.epoch},"period":{self.period}'
            f',"period_start":{json_text.string(self.period_start)}'
            f',"period_end":{json_text.string(self.period_end)},"noisy_count":'
        )
        before_index = (
            f',"epsilon":{json_text.number(self.epsilon)}'
            f',"sensitivity":{json_text.number(self.sensitivity)}'
            f',"horizon":{json_text.number(self.horizon)}'
            f',"mechanism":{json_text.string(self.mechanism)}'
            f',"objective":{json_text.string(self.objective)}'
            f',"noise":{json_text.string(self.noise)}'
            f',"noise_secure":{"true" if self.noise_secure else "false"},"counter_index":'
        )
        optional = json_text.members(self.optional_fields)
        object.__setattr__(self, "_text", (before_counter, before_count, before_index, optional))


#: a release's fields before its optional ones, in the order its JSON has them
_RELEASE_FIELDS = (
    "schema_version",
    "kind",
    "key",
    "stream",
    "counter",
    "epoch",
    "period",
    "period_start",
    "period_end",
    "noisy_count",
    "noisy_total",
    "count_std",
    "total_std",
    "epsilon",
    "sensitivity",
    "horizon",
    "mechanism",
    "objective",
    "noise",
    "noise_secure",
    "counter_index",
)


@dataclass(frozen=True, slots=True)
class ReleaseRecord:
    """One counter's noisy release at the close of one period (DESIGN §5 outputs): its own
    values, and the :class:`ReleaseContext` it shares with the other releases of the close
    (read through as attributes: ``record.stream``, ``record.epoch``, ...)."""

    kind: ClassVar[RecordKind] = "release"

    context: ReleaseContext
    counter: str
    # the counter's position among the stream's counters as declared (readers order by it)
    counter_index: int
    # int for integer mechanisms; float for kary_gls (and projected k-ary) releases
    noisy_count: int | float
    noisy_total: int | float
    count_std: float
    total_std: float

    @property
    def stream(self) -> str:
        return self.context.stream

    @property
    def epoch(self) -> int:
        return self.context.epoch

    @property
    def period(self) -> int:
        return self.context.period

    @property
    def period_start(self) -> str:
        return self.context.period_start

    @property
    def period_end(self) -> str:
        return self.context.period_end

    @property
    def epsilon(self) -> float:
        return self.context.epsilon

    @property
    def sensitivity(self) -> int:
        return self.context.sensitivity

    @property
    def horizon(self) -> int:
        return self.context.horizon

    @property
    def mechanism(self) -> str:
        return self.context.mechanism

    @property
    def objective(self) -> str:
        return self.context.objective

    @property
    def noise(self) -> str:
        return self.context.noise

    @property
    def noise_secure(self) -> bool:
        return self.context.noise_secure

    @property
    def optional_fields(self) -> Mapping[str, object]:
        return self.context.optional_fields

    @property
    def key(self) -> str:
        context = self.context
        return f"{context.stream}|{self.counter}|{context.epoch}|{context.period}"

    def to_dict(self) -> dict[str, Any]:
        context = self.context
        fields = context.counter_fields
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
            "key": self.key,
            "stream": context.stream,
            "counter": self.counter,
            "epoch": context.epoch,
            "period": context.period,
            "period_start": context.period_start,
            "period_end": context.period_end,
            "noisy_count": self.noisy_count,
            "noisy_total": self.noisy_total,
            "count_std": self.count_std,
            "total_std": self.total_std,
            "epsilon": context.epsilon,
            "sensitivity": context.sensitivity,
            "horizon": context.horizon,
            "mechanism": context.mechanism,
            "objective": context.objective,
            "noise": context.noise,
            "noise_secure": context.noise_secure,
            "counter_index": self.counter_index,
            **context.optional_fields,
            **({} if fields is None else fields.of(self.counter_index)),
        }

    def to_json(self) -> str:
        """The compact JSON of :meth:`to_dict` (``json.dumps`` with ``(",", ":")``, byte for
        byte), assembled from the context's pieces and this record's values."""
        context = self.context
        before_counter, before_count, before_index, optional = context._text
        fields = context.counter_fields
        number = json_text.number
        return "".join(
            (
                _RELEASE_HEAD,
                json_text.string(self.key),
                before_counter,
                json_text.string(self.counter),
                before_count,
                number(self.noisy_count),
                ',"noisy_total":',
                number(self.noisy_total),
                ',"count_std":',
                number(self.count_std),
                ',"total_std":',
                number(self.total_std),
                before_index,
                number(self.counter_index),
                optional,
                "" if fields is None else fields.json_of(self.counter_index),
                "}",
            )
        )


_RELEASE_HEAD = f'{{"schema_version":{SCHEMA_VERSION},"kind":"release","key":'
