"""The plain state of a :class:`~streamdp.continual.factored_counter.FactoredCounter` and its
restore, which never draws noise again.

:func:`factored_state` writes JSON-serialisable data holding the raw running totals (protect
it like the input data), the epoch's node noise once drawn, and the finalised noisy nodes
(either of the last two may be left out: the daemon stores them once itself and puts them back
before :func:`restore_factored`).

State size per counter: ``nodes`` noise integers, about ``N k / (k - 1)`` (``N = 4095, k = 11``:
4,506), plus as many finalised noisy node values by the end of the epoch, plus ``L`` raw block
starts. At 8 bytes per value that is about ``16 N k / (k - 1)`` bytes per counter: 72 KB at
``N = 4095``, 18 MB at ``N = 10^6`` (plus ``16 N`` bytes of fixed-point decoded noise in
memory). It stops being sensible around ``N = 10^6`` per counter for a JSON snapshot (tens of
MB per counter): use a daily horizon of years, not seconds, or Fenwick FDA, whose state grows
one node per period.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from streamdp.continual.bank_state import bank_state, check_state_header, periods_closed
from streamdp.continual.counter_checks import int_vector
from streamdp.continual.factored_blocks import finalised_nodes
from streamdp.continual.gaussian_budgets import GaussianBudget
from streamdp.continual.kary import KaryStrategy
from streamdp.errors import ConfigError, StateError
from streamdp.noise.sampler import NoiseSampler

if TYPE_CHECKING:
    from streamdp.continual.factored_counter import FactoredCounter

STATE_VERSION = 1
STATE_KIND = "streamdp.factored-counter"


def factored_state(
    counter: FactoredCounter, *, with_noise: bool, with_nodes: bool
) -> dict[str, Any]:
    """``counter``'s state (see :meth:`FactoredCounter.state`)."""
    s = counter.strategy
    noise = counter.epoch_noise()
    out = {
        "kind": STATE_KIND,
        "version": STATE_VERSION,
        "mechanism": s.mechanism,
        "objective": s.objective,
        "horizon": s.horizon,
        "branching": s.branching,
        "budgets": list(s.budgets),
        **bank_state(counter),
        "noise_drawn": noise is not None,
        "node_noise": noise.tolist() if with_noise and noise is not None else None,
        "exact_total": counter._exact_total.tolist(),
        "block_start": counter._block_start.tolist(),
    }
    if counter.gaussian is not None:  # a zCDP counter: its budget rebuilds the same sigmas
        out["gaussian"] = counter.gaussian.to_dict()
    if with_nodes:
        out["noisy_nodes"] = [v.tolist() for v in counter._final]
    return out


def restore_factored(
    counter_type: type[FactoredCounter],
    state: dict[str, Any],
    sampler: NoiseSampler,
    projection: npt.NDArray[np.float64] | None,
) -> FactoredCounter:
    """A ``counter_type`` restored from ``state`` without drawing (see
    :meth:`FactoredCounter.from_state` for what is refused)."""
    try:
        check_state_header(state, STATE_KIND, STATE_VERSION, "factored-counter", sampler)
        strategy = KaryStrategy(
            mechanism=state["mechanism"],
            objective=state["objective"],
            horizon=int(state["horizon"]),
            branching=int(state["branching"]),
            budgets=tuple(float(b) for b in state["budgets"]),
        )
        counter = counter_type(
            strategy,
            state["epsilon"],
            state["sensitivity"],
            state["width"],
            sampler,
            epoch=state["epoch"],
            carry=np.asarray(state["carry"], dtype=np.float64),
            carry_variance=state["carry_variance"],
            noise_label=state.get("noise_label", ""),
            projection=projection,
            gaussian=(GaussianBudget.from_dict(state["gaussian"]) if "gaussian" in state else None),
        )
        noise = state.get("node_noise")
        if noise is not None:
            counter.adopt_noise(np.asarray(noise, dtype=np.int64))
        elif state["noise_drawn"] or state["periods_closed"]:
            raise StateError(
                f"epoch {counter.epoch}'s node noise is missing from the state; refusing to "
                "restore (drawn noise is never drawn again): restore its stored noise"
            )
        closed = periods_closed(state, strategy.horizon)
        values = [int_vector(v, counter.width, "noisy node") for v in state["noisy_nodes"]]
        ids, rows = finalised_nodes(strategy, closed)
        if len(values) != len(ids):
            raise StateError(
                f"state holds {len(values)} finalised nodes; {closed} closed periods "
                f"finalise {len(ids)}"
            )
        counter._exact_total = int_vector(state["exact_total"], counter.width, "total")
        starts = np.asarray(state["block_start"], dtype=np.int64)
        if starts.shape != (strategy.levels, counter.width):
            raise StateError(f"block_start must have shape ({strategy.levels}, width)")
        counter._block_start = starts
    except StateError:
        raise
    except (KeyError, TypeError, ValueError, ConfigError) as error:
        raise StateError(f"factored-counter state is malformed: {error}") from error
    counter._closed = closed
    counter._final_ids = ids
    counter._final = values
    counter._period_rows = rows
    return counter
