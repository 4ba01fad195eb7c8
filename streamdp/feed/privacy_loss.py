"""What one event (or one privacy unit) can lose, per stream and per input source (pure).

DESIGN §2: a stream spends its budget (epsilon, or rho under zCDP) once per epoch; the epochs
of a stream hold disjoint events, so one event loses one epoch's budget through that stream.
Streams reading the same source compose: one event of the source is counted in one epoch of
*each* of them, so it can lose the sum of their per-epoch budgets (epochs of different streams
need not align: the sum is over streams, each at its largest per-epoch budget). A stream with a
privacy unit bounds one unit's records per epoch: one unit whose records fall in one epoch of
each stream loses that same sum, and over the streams' lives the sum over every epoch of every
stream. A source composes within one definition (its streams are all pure DP or all zCDP);
zCDP budgets add as rho and are also stated as (epsilon, delta) at the smallest delta of the
streams' records (:func:`streamdp.continual.definitions.zcdp_epsilon`).

Sums are exact: the released floats are added as the decimals they print as.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from streamdp.continual.definitions import zcdp_epsilon
from streamdp.engine.ledger import exact_sum
from streamdp.feed.records import Release


@dataclass
class StreamLoss:
    """One stream's privacy fields as its releases state them, per epoch."""

    stream: str
    source: str | None = None
    #: None: the stream protects one event; else the record field naming its unit
    unit_field: str | None = None
    epsilon_per_epoch: dict[int, float] = field(default_factory=dict)
    #: zCDP streams only: (rho, delta) per epoch
    rho_per_epoch: dict[int, tuple[float, float]] = field(default_factory=dict)

    @property
    def definition(self) -> str:
        return "zcdp" if self.rho_per_epoch else "pure"

    def budgets(self) -> list[Decimal]:
        """The budget of each epoch in the definition's unit (rho or epsilon), exactly."""
        if self.rho_per_epoch:
            return [_exact(rho) for rho, _ in self.rho_per_epoch.values()]
        return [_exact(eps) for eps in self.epsilon_per_epoch.values()]

    def deltas(self) -> list[float]:
        return [delta for _, delta in self.rho_per_epoch.values()]

    def fields(self) -> dict[str, Any]:
        """The stream's figures in ``feed.json``: epsilon per epoch and summed over epochs
        (what one event in each epoch, or one unit present in every epoch, could lose through
        this stream alone) and, for zCDP, rho likewise with the sum as (epsilon, delta) (the
        epsilon sum is then null: the epochs' epsilons hold at their delta each, not summed)."""
        rho_sum = exact_sum(self.budgets()) if self.rho_per_epoch else None
        return {
            "source": self.source,
            "epsilon_per_epoch": [
                {"epoch": e, "epsilon": self.epsilon_per_epoch[e]}
                for e in sorted(self.epsilon_per_epoch)
            ],
            # pure epsilon only: summing the epochs' (epsilon, delta) bounds would hold only at
            # the summed delta; a zCDP stream's sum is rho_sum_over_epochs, converted below
            "epsilon_sum_over_epochs": None
            if self.rho_per_epoch
            else _shown_at_least(exact_sum(_exact(v) for v in self.epsilon_per_epoch.values())),
            "rho_per_epoch": [
                {"epoch": e, "rho": rho, "delta": delta}
                for e, (rho, delta) in sorted(self.rho_per_epoch.items())
            ],
            "rho_sum_over_epochs": None if rho_sum is None else _shown_at_least(rho_sum),
            # that sum as (epsilon, delta) at the epochs' delta (the smallest one)
            "rho_sum_over_epochs_epsilon": (
                None if rho_sum is None else zcdp_epsilon(str(rho_sum), min(self.deltas()))
            ),
        }


def stream_loss(stream: str, releases: Iterable[Release]) -> StreamLoss:
    """The privacy fields of ``stream`` from its ``releases`` (the newest record's source and
    unit: a spec may change them between epochs, and the page states the current ones)."""
    loss = StreamLoss(stream)
    newest: tuple[int, int] | None = None
    for release in releases:
        loss.epsilon_per_epoch[release.epoch] = release.epsilon
        if release.rho is not None and release.delta is not None:
            loss.rho_per_epoch[release.epoch] = (release.rho, release.delta)
        if newest is None or (release.epoch, release.period) >= newest:
            newest = (release.epoch, release.period)
            loss.source, loss.unit_field = release.source, release.unit_field
    return loss


def source_losses(losses: Iterable[StreamLoss]) -> list[dict[str, Any]]:
    """Per input source (and definition), what one event, and one unit, can lose across all
    the streams reading it (``feed.json``'s ``sources``; see the module).

    Each entry: ``source``, ``definition`` (``pure`` or ``zcdp``), ``streams`` (each with its
    largest per-epoch ``budget`` and what it ``protects``), ``event`` (one event: ``epsilon``,
    or ``rho`` with its ``epsilon`` at ``delta``), ``unit`` (when every stream bounds the same
    unit field: ``field``, ``per_epoch`` as ``event`` for one unit whose records fall in one
    epoch of each stream, ``lifetime`` likewise summed over every epoch of every stream; else
    null) and ``unit_fields`` (the unit fields some of its streams bound). Streams whose records
    do not name their source (written before releases named it) are left out: with the source
    unknown, their loss cannot be composed with any other stream's."""
    groups: dict[tuple[str, str], list[StreamLoss]] = {}
    for loss in losses:
        if loss.source is not None and loss.epsilon_per_epoch:
            groups.setdefault((loss.source, loss.definition), []).append(loss)
    out = []
    for (source, definition), members in sorted(groups.items()):
        members.sort(key=lambda m: m.stream)
        zcdp = definition == "zcdp"
        delta = min((d for m in members for d in m.deltas()), default=None)
        per_epoch = exact_sum(max(m.budgets()) for m in members)
        lifetime = exact_sum(b for m in members for b in m.budgets())
        fields = {m.unit_field for m in members}
        unit_fields = sorted(f for f in fields if f is not None)
        out.append(
            {
                "source": source,
                "definition": definition,
                "streams": [
                    {
                        "stream": m.stream,
                        "budget": float(max(m.budgets())),
                        "protects": "event" if m.unit_field is None else m.unit_field,
                    }
                    for m in members
                ],
                "event": _loss(per_epoch, zcdp, delta),
                "unit": (
                    {
                        "field": unit_fields[0],
                        "per_epoch": _loss(per_epoch, zcdp, delta),
                        "lifetime": _loss(lifetime, zcdp, delta),
                    }
                    if len(fields) == 1 and unit_fields
                    else None
                ),
                "unit_fields": unit_fields,
            }
        )
    return out


def _loss(amount: Decimal, zcdp: bool, delta: float | None) -> dict[str, float]:
    if not zcdp:
        return {"epsilon": _shown_at_least(amount)}
    assert delta is not None  # a zCDP stream's records carry it
    return {
        "rho": _shown_at_least(amount),
        "epsilon": zcdp_epsilon(str(amount), delta),
        "delta": delta,
    }


def _shown_at_least(amount: Decimal) -> float:
    """The float whose printed decimal (the convention of every budget field: :func:`_exact`)
    is the nearest at or above ``amount``: ``0.6`` for 0.6, one step up when the sum has more
    digits than a float prints."""
    value = float(amount)
    if Decimal(repr(value)) < amount:
        value = math.nextafter(value, math.inf)
    return value


def _exact(value: float) -> Decimal:
    """A released float as the decimal it prints as (0.1 + 0.2 adds up to 0.3)."""
    return Decimal(repr(value))
