"""A continual-counting strategy: which nodes exist, what each covers, and their weights.

``fda`` and ``binary`` use the Fenwick tree of DESIGN §3 (``fda``: optimal weights for the chosen
objective; ``binary``: all weights ``1/L``, the objective is ignored). ``naive`` releases every
period with its own full-budget noise: node ``i`` covers only period ``i`` (weight 1) and the
read path of ``t`` is ``1..t``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

import numpy as np
import numpy.typing as npt

from streamdp.continual import fenwick
from streamdp.continual.fda import (
    Objective,
    binary_weights,
    check_horizon,
    check_objective,
    optimal_weights,
)
from streamdp.errors import ConfigError

Mechanism = Literal["fda", "binary", "naive"]
MECHANISMS: tuple[Mechanism, ...] = ("fda", "binary", "naive")


def check_mechanism(mechanism: str) -> Mechanism:
    """Return ``mechanism`` typed as :data:`Mechanism`, or raise :class:`ConfigError`."""
    for known in MECHANISMS:
        if mechanism == known:
            return known
    raise ConfigError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {mechanism!r}")


@dataclass(frozen=True)
class Strategy:
    """Nodes ``1..horizon`` with weights ``weights[i-1] = lambda_i`` (read-only array, ``(N,)``).

    Equality and hashing use ``(mechanism, objective, horizon)``, which determine the weights.
    """

    mechanism: Mechanism
    objective: Objective
    horizon: int
    weights: npt.NDArray[np.float64] = field(compare=False, repr=False)

    @property
    def is_tree(self) -> bool:
        """True for the Fenwick-tree mechanisms (fda, binary)."""
        return self.mechanism != "naive"

    def _check_period(self, t: int, what: str) -> None:
        if not 1 <= t <= self.horizon:
            raise ConfigError(f"{what} must be in 1..{self.horizon}, got {t}")

    def read_path(self, t: int) -> list[int]:
        """Node indices (1-based) summed for the noisy running total ``s~_t``."""
        self._check_period(t, "release")
        if self.is_tree:
            return fenwick.read_path(t)
        return list(range(t, 0, -1))

    def covering_nodes(self, p: int) -> list[int]:
        """Nodes whose sum includes period ``p``."""
        self._check_period(p, "period")
        if self.is_tree:
            return fenwick.update_chain(p, self.horizon)
        return [p]

    def children(self, t: int) -> list[int]:
        """Nodes whose raw sums are folded into node ``t`` when it is finalised."""
        self._check_period(t, "node")
        return fenwick.children(t) if self.is_tree else []

    def parent(self, j: int) -> int | None:
        """The node that absorbs node ``j``'s raw sum, or None (beyond the horizon / naive)."""
        self._check_period(j, "node")
        if not self.is_tree:
            return None
        up = fenwick.parent(j)
        return up if up <= self.horizon else None


@lru_cache(maxsize=128)
def build_strategy(mechanism: Mechanism, objective: Objective, horizon: int) -> Strategy:
    """The strategy for ``(mechanism, objective, horizon)``; cached, weights read-only."""
    mech = check_mechanism(mechanism)
    obj = check_objective(objective)
    n = check_horizon(horizon)
    if mech == "fda":
        weights = optimal_weights(n, obj)
    elif mech == "binary":
        weights = binary_weights(n)
    else:
        weights = np.ones(n, dtype=np.float64)
    weights.flags.writeable = False
    return Strategy(mechanism=mech, objective=obj, horizon=n, weights=weights)
