"""The budget ledger as the metrics see it: per stream and per source epsilon, exact decimals.

Epsilon arrives from the ledger as exact decimals (or as floats from a test or an exporter) and
the derived values (a source's headroom, what a stream's next epoch adds) are computed in exact
decimal arithmetic, so a cap committed in full shows a headroom of exactly 0. Pure: no
Prometheus here; :class:`streamdp.metrics.StreamdpMetrics` reads a :class:`BudgetView` at every
scrape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from streamdp.engine.ledger import exact_sum

#: An epsilon as the ledger holds it (exact decimal) or as a float from a test or an exporter.
Epsilon = Decimal | float


def exact_epsilon(value: Epsilon) -> Decimal:
    """``value`` as an exact decimal: a Decimal as is, a float by its shortest repr (so a float
    made from a configured decimal such as 0.1 gives back exactly 0.1, not 0.10000000000000000555).
    """
    exact = value if isinstance(value, Decimal) else Decimal(repr(float(value)))
    if not exact.is_finite():
        raise ValueError(f"a budget value must be finite, got {value!r}")
    return exact


def exact_difference(a: Decimal, b: Decimal) -> Decimal:
    """``a - b`` with no rounding (the default context keeps 28 digits: a headroom of 1 -
    (0.5 + 1e-29) would read 0.5)."""
    return exact_sum((a, b.copy_negate()))


@dataclass(frozen=True)
class StreamBudget:
    """The ledger's view of one stream's spend on one source.

    ``epsilon_spent`` is the largest epsilon of the stream's recorded epochs (its event-level
    spend: epochs hold disjoint events and compose in parallel)."""

    stream: str
    source: str
    epsilon_per_epoch: Epsilon
    epsilon_spent: Epsilon
    # "rho" for a zCDP stream: then the two amounts above are rho (issue 27), and
    # ``zcdp_epsilon`` is the (epsilon, delta) bound of its rho per epoch
    unit: str = "epsilon"
    zcdp_epsilon: Epsilon | None = None

    @property
    def next_epoch_epsilon(self) -> Decimal:
        """Event-level epsilon the stream's next epoch adds to its source (exact): what the
        ledger checks against the source's headroom before recording the spend
        (:meth:`streamdp.engine.ledger.BudgetLedger.record_epoch`)."""
        return max(
            exact_difference(
                exact_epsilon(self.epsilon_per_epoch), exact_epsilon(self.epsilon_spent)
            ),
            Decimal(0),
        )


@dataclass(frozen=True)
class SourceBudget:
    """The ledger's view of one input source: its cap and what its streams spent."""

    source: str
    epsilon_cap: Epsilon
    epsilon_spent: Epsilon
    # the sum over every epoch: one event in each, or one privacy unit over them (see
    # BudgetLedger.sequential_spent)
    sequential_spent: Epsilon = 0.0
    # "rho" for a zCDP source: then every amount above is rho (issue 27)
    unit: str = "epsilon"

    @property
    def epsilon_headroom(self) -> Decimal:
        """Cap minus event-level spend, exact (negative only if the ledger is over its cap)."""
        return exact_difference(exact_epsilon(self.epsilon_cap), exact_epsilon(self.epsilon_spent))


@dataclass(frozen=True)
class BudgetView:
    """A consistent snapshot of the durable budget ledger, as the metrics need it."""

    streams: tuple[StreamBudget, ...] = ()
    sources: tuple[SourceBudget, ...] = ()


BudgetProvider = Callable[[], BudgetView]
