"""The plain state of a :class:`~streamdp.continual.counter.ContinualCounter` and its restore.

:func:`continual_state` writes JSON-serialisable data holding every noisy node drawn so far (or
none of them, when the daemon stores each node once itself); :func:`restore_continual` rebuilds
the counter from it without drawing, so a restart republishes identical values (drawing again
would let an observer average the noise away). The state holds raw partial sums of pending
nodes: protect it like the input data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from streamdp.continual.bank_state import bank_state, check_state_header, periods_closed
from streamdp.continual.counter_checks import int_vector
from streamdp.continual.gaussian_budgets import GaussianBudget
from streamdp.continual.strategy import build_strategy
from streamdp.errors import ConfigError, StateError
from streamdp.noise.sampler import NoiseSampler

if TYPE_CHECKING:
    from streamdp.continual.counter import ContinualCounter

STATE_VERSION = 1
STATE_KIND = "streamdp.continual-counter"


def continual_state(counter: ContinualCounter, *, with_nodes: bool) -> dict[str, Any]:
    """``counter``'s state (see :meth:`ContinualCounter.state`); ``noisy_nodes`` only
    ``with_nodes``."""
    out = {
        "kind": STATE_KIND,
        "version": STATE_VERSION,
        "mechanism": counter.strategy.mechanism,
        "objective": counter.strategy.objective,
        "horizon": counter.horizon,
        **bank_state(counter),
        "pending": [[j, counter._pending[j].tolist()] for j in sorted(counter._pending)],
    }
    if counter.gaussian is not None:  # a zCDP counter: its budget rebuilds the same sigmas
        out["gaussian"] = counter.gaussian.to_dict()
    if with_nodes:
        out["noisy_nodes"] = [v.tolist() for v in counter._noisy]
    return out


def restore_continual(
    counter_type: type[ContinualCounter], state: dict[str, Any], sampler: NoiseSampler
) -> ContinualCounter:
    """A ``counter_type`` restored from ``state`` without drawing any noise (see
    :meth:`ContinualCounter.from_state` for what is refused)."""
    try:
        check_state_header(state, STATE_KIND, STATE_VERSION, "continual-counter", sampler)
        strategy = build_strategy(state["mechanism"], state["objective"], state["horizon"])
        counter = counter_type(
            strategy,
            state["epsilon"],
            state["sensitivity"],
            state["width"],
            sampler,
            epoch=state["epoch"],
            carry=np.asarray(state["carry"], dtype=np.int64),
            carry_variance=state["carry_variance"],
            noise_label=state.get("noise_label", ""),
            gaussian=(GaussianBudget.from_dict(state["gaussian"]) if "gaussian" in state else None),
        )
        closed = periods_closed(state, strategy.horizon)
        noisy = [int_vector(v, counter.width, "noisy node") for v in state["noisy_nodes"]]
        if len(noisy) != closed:
            raise StateError(f"state holds {len(noisy)} noisy nodes but {closed} closed periods")
        pending = {int(j): int_vector(v, counter.width, "pending sum") for j, v in state["pending"]}
        expected = {
            j
            for j in range(1, closed + 1)
            if (up := strategy.parent(j)) is not None and up > closed
        }
        if set(pending) != expected:
            raise StateError(
                f"pending nodes {sorted(pending)} do not match the {closed} closed periods "
                f"(expected {sorted(expected)})"
            )
    except StateError:
        raise
    except (KeyError, TypeError, ValueError, ConfigError) as error:
        raise StateError(f"continual-counter state is malformed: {error}") from error
    counter._closed = closed
    counter._noisy = noisy
    counter._pending = pending
    if closed:
        before = np.zeros(counter.width, dtype=np.int64)
        for value in noisy[:-1]:
            before += value  # s~_{closed-1} of the one-node-per-period sum (naive)
        counter._last_total = strategy.next_total(noisy, closed, before)
    return counter
