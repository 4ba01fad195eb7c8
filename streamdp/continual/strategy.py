"""Continual-counting strategies: one interface, one class per family of mechanisms.

Every strategy states, for a horizon ``N``:

- its nodes and what each covers (:meth:`node_intervals`, 1-based periods) and each node's share
  ``lambda_i`` of epsilon (``weights``; node noise scale ``Delta / (epsilon lambda_i)``);
- how releases are decoded from node noise (:meth:`decode_noise`: release ``t`` is the exact
  running total plus ``n_t``, a fixed linear image of the node noise);
- the exact variance of every running total, period count and calendar range
  (:meth:`total_variances`, :meth:`count_variances`, :meth:`range_variance`) for given node
  noise variances;
- what a counter must store per epoch (``state_values_per_counter`` noisy values per counter).

Families:

- :class:`Strategy` — one node released per period close (``fda``, ``binary``: the Fenwick tree
  of DESIGN §3 with optimal or equal weights; ``naive``: node ``i`` is period ``i`` alone). The
  counter draws node ``t``'s noise when period ``t`` closes
  (:class:`streamdp.continual.counter.ContinualCounter`).
- :class:`streamdp.continual.kary.KaryStrategy` — every block of a k-ary tree, noise drawn at
  the epoch's start, decoded by negative digits (``kary_digits``) or GLS (``kary_gls``)
  (:class:`streamdp.continual.factored_counter.FactoredCounter`).

The Fenwick/naive differences live in two layout objects (:mod:`streamdp.continual.layouts`)
chosen once from :data:`_FAMILIES`; no code branches on a mechanism's name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from streamdp.continual.counter_checks import check_horizon
from streamdp.continual.fda import (
    OBJECTIVES,
    Objective,
    binary_weights,
    check_objective,
    optimal_weights,
)
from streamdp.continual.kary import KaryStrategy
from streamdp.continual.kary_config import KARY_MECHANISMS, KARY_OBJECTIVES, check_kary_objective
from streamdp.continual.kary_optimise import optimise
from streamdp.continual.layouts import FENWICK, SINGLETONS, Layout
from streamdp.errors import ConfigError

if TYPE_CHECKING:
    from streamdp.continual.privacy import Epsilon

Mechanism = Literal["fda", "binary", "naive"]
MECHANISMS: tuple[Mechanism, ...] = ("fda", "binary", "naive")
"""Mechanisms that release one node per period close (:class:`ContinualCounter`)."""
ALL_MECHANISMS: tuple[str, ...] = (*MECHANISMS, *KARY_MECHANISMS)
"""Every mechanism, including the k-ary ones drawn at the epoch's start."""

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def objectives_for(mechanism: str) -> tuple[str, ...]:
    """The objectives ``mechanism`` can be planned and released with (one rule for the spec,
    ``streamdp plan`` and its CLI): fda chooses its node weights for
    ``total`` or ``minimax``; the k-ary mechanisms their level budgets for ``total``,
    ``minimax`` or ``count``; binary and naive have fixed weights, so only ``total`` (the
    default, which changes nothing) describes them. :class:`ConfigError` for an unknown
    mechanism."""
    if mechanism in KARY_MECHANISMS:
        return KARY_OBJECTIVES
    if mechanism == "fda":
        return OBJECTIVES
    if mechanism in ALL_MECHANISMS:
        return ("total",)
    raise ConfigError(f"mechanism must be one of {', '.join(ALL_MECHANISMS)}, got {mechanism!r}")


def check_mechanism(mechanism: str) -> Mechanism:
    """Return ``mechanism`` typed as :data:`Mechanism`, or raise :class:`ConfigError`."""
    for known in MECHANISMS:
        if mechanism == known:
            return known
    raise ConfigError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")


@runtime_checkable
class CountingStrategy(Protocol):
    """What every strategy states (see the module docstring); arrays over nodes or periods."""

    @property
    def mechanism(self) -> str: ...

    @property
    def objective(self) -> str: ...

    @property
    def horizon(self) -> int: ...

    @property
    def weights(self) -> FloatArray: ...

    @property
    def node_count(self) -> int: ...

    @property
    def state_values_per_counter(self) -> int: ...

    def node_intervals(self) -> tuple[IntArray, IntArray]: ...

    def decode_noise(self, z: FloatArray, node_var: FloatArray) -> FloatArray: ...

    def total_variances(self, node_var: FloatArray) -> FloatArray: ...

    def count_variances(self, node_var: FloatArray) -> FloatArray: ...

    def range_variance(self, first: int, last: int, node_var: FloatArray) -> float: ...


_FAMILIES: dict[str, tuple[Layout, Callable[[int, Objective], FloatArray]]] = {
    "fda": (FENWICK, optimal_weights),
    "binary": (FENWICK, lambda n, _objective: binary_weights(n)),
    "naive": (SINGLETONS, lambda n, _objective: np.ones(n, dtype=np.float64)),
}


@dataclass(frozen=True)
class Strategy:
    """Nodes ``1..horizon`` with weights ``weights[i-1] = lambda_i`` (read-only array, ``(N,)``).

    One node per period: node ``t`` is final when period ``t`` closes. Equality and hashing use
    ``(mechanism, objective, horizon)``, which determine the weights.
    """

    mechanism: Mechanism
    objective: Objective
    horizon: int
    weights: npt.NDArray[np.float64] = field(compare=False, repr=False)
    layout: Layout = field(compare=False, repr=False, default=FENWICK)

    def _check_period(self, t: int, what: str) -> None:
        if not 1 <= t <= self.horizon:
            raise ConfigError(f"{what} must be in 1..{self.horizon}, got {t}")

    @property
    def is_tree(self) -> bool:
        """True for the Fenwick-tree layout (fda, binary); False for naive."""
        return self.layout is FENWICK

    @property
    def node_count(self) -> int:
        """``N``: one node per period."""
        return self.horizon

    @property
    def state_values_per_counter(self) -> int:
        """Noisy node values a counter holds at the end of an epoch (one per period)."""
        return self.horizon

    def read_path(self, t: int) -> list[int]:
        """Node indices (1-based) summed for the noisy running total ``s~_t``."""
        self._check_period(t, "release")
        return self.layout.read_path(t)

    def covering_nodes(self, p: int) -> list[int]:
        """Nodes whose sum includes period ``p``."""
        self._check_period(p, "period")
        return self.layout.covering_nodes(p, self.horizon)

    def children(self, t: int) -> list[int]:
        """Nodes whose raw sums are folded into node ``t`` when it is finalised."""
        self._check_period(t, "node")
        return self.layout.children(t)

    def parent(self, j: int) -> int | None:
        """The node that absorbs node ``j``'s raw sum, or None (beyond the horizon / naive)."""
        self._check_period(j, "node")
        return self.layout.parent(j, self.horizon)

    def node_intervals(self) -> tuple[IntArray, IntArray]:
        """``(first, last)`` period covered by every node, 1-based; each shape ``(N,)``."""
        pairs = np.array([self.layout.interval(i) for i in range(1, self.horizon + 1)])
        return pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)

    def decode_noise(
        self,
        z: FloatArray,
        node_var: FloatArray | None = None,  # noqa: ARG002 - the interface's; unused here
    ) -> FloatArray:
        """Noise of every running total: the read-path sums of node noise ``z``
        (shape ``(N, ...)``); ``node_var`` is not needed (the decoding is fixed)."""
        return self.layout.path_sums(np.asarray(z, dtype=np.float64))

    def total_variances(self, node_var: FloatArray) -> FloatArray:
        """``Var(s~_t)`` for ``t = 1..N``; shape ``(N,)``."""
        return self.layout.path_sums(np.asarray(node_var, dtype=np.float64))

    def count_variances(self, node_var: FloatArray) -> FloatArray:
        """``Var(s~_t - s~_{t-1})`` for ``t = 1..N``; shape ``(N,)``."""
        return self.layout.count_variances(node_var)

    def total_variance(self, node_var: FloatArray, t: int) -> float:
        """``Var(s~_t)`` of one release in O(path length); ``Var(s~_0) = 0``."""
        return 0.0 if t == 0 else self.layout.total_variance(node_var, t)

    def count_variance(self, node_var: FloatArray, t: int) -> float:
        """``Var(s~_t - s~_{t-1})`` of one release."""
        return self.layout.count_variance(node_var, t)

    def next_total(self, noisy: Sequence[IntArray], t: int, previous: IntArray) -> IntArray:
        """``s~_t`` from the noisy nodes ``1..t`` (``noisy[i-1]``) and ``previous = s~_{t-1}``."""
        return self.layout.next_total(noisy, t, previous)

    def range_variance(self, first: int, last: int, node_var: FloatArray) -> float:
        """``Var(s~_last - s~_{first-1})``: nodes on exactly one of the two read paths."""
        if not 1 <= first <= last <= self.horizon:
            raise ConfigError(
                f"range must satisfy 1 <= first <= last <= {self.horizon}, got {first}..{last}"
            )
        upper = set(self.layout.read_path(last))
        lower = set(self.layout.read_path(first - 1)) if first > 1 else set()
        return float(sum(float(node_var[i - 1]) for i in upper ^ lower))


@lru_cache(maxsize=128)
def build_strategy(mechanism: Mechanism, objective: Objective, horizon: int) -> Strategy:
    """The strategy for ``(mechanism, objective, horizon)``; cached, weights read-only."""
    mech = check_mechanism(mechanism)
    obj = check_objective(objective)
    n = check_horizon(horizon)
    layout, make_weights = _FAMILIES[mech]
    weights = np.array(make_weights(n, obj), dtype=np.float64)
    weights.flags.writeable = False
    return Strategy(mechanism=mech, objective=obj, horizon=n, weights=weights, layout=layout)


def build_any_strategy(
    mechanism: str, objective: str, horizon: int, branching: int | None = None
) -> Strategy | KaryStrategy:
    """Any mechanism of :data:`ALL_MECHANISMS`; the k-ary ones optimise ``k`` (unless
    ``branching`` is given) and their level budgets for ``objective`` and ``horizon``."""
    if mechanism in KARY_MECHANISMS:
        return optimise(mechanism, check_kary_objective(objective), horizon, branching)
    if branching is not None:
        raise ConfigError(
            f"branching (k) applies to {', '.join(KARY_MECHANISMS)} only, not {mechanism!r}"
        )
    if mechanism not in MECHANISMS:
        raise ConfigError(
            f"mechanism must be one of {', '.join(ALL_MECHANISMS)}, got {mechanism!r}"
        )
    return build_strategy(check_mechanism(mechanism), check_objective(objective), horizon)


def check_noise_scales(  # noqa: PLR0917 - a stream's noise parameters, in spec order
    mechanism: str,
    objective: str,
    horizon: int,
    epsilon: Epsilon,
    sensitivity: float,
    branching: int | None = None,
) -> None:
    """Raise :class:`ConfigError` unless every node's exact noise scale is within the sampler's
    safe range (:data:`streamdp.noise.sampler.MAX_NOISE_SCALE`) for this configuration."""
    from streamdp.continual.factored_noise import level_scales
    from streamdp.continual.node_budgets import node_budgets

    strategy = build_any_strategy(mechanism, objective, horizon, branching)
    if isinstance(strategy, KaryStrategy):
        level_scales(strategy, epsilon, sensitivity)
    else:
        node_budgets(strategy, epsilon, sensitivity)
