"""The part of a counter's plain state both kinds share: the fields written alike
(:func:`bank_state`), and on restore the header (kind, version, sampler security) and the
periods closed, checked alike."""

from __future__ import annotations

from typing import Any, Protocol

import numpy.typing as npt

from streamdp.errors import StateError
from streamdp.noise.sampler import NoiseSampler


class BankFields(Protocol):
    """What :func:`bank_state` reads of a counter (either kind)."""

    epsilon: float
    sensitivity: float
    width: int
    epoch: int
    sampler: NoiseSampler
    noise_label: str
    carry: npt.NDArray[Any]
    carry_variance: float

    @property
    def periods_closed(self) -> int: ...


def bank_state(counter: BankFields) -> dict[str, Any]:
    """The state fields every counter kind writes alike, in their order (after the kind,
    version and strategy fields): privacy parameters, width, epoch, sampler, noise label,
    periods closed and the carried total."""
    return {
        "epsilon": counter.epsilon,
        "sensitivity": counter.sensitivity,
        "width": counter.width,
        "epoch": counter.epoch,
        "sampler": {"name": counter.sampler.name, "secure": bool(counter.sampler.secure)},
        "noise_label": counter.noise_label,
        "periods_closed": counter.periods_closed,
        "carry": counter.carry.tolist(),
        "carry_variance": counter.carry_variance,
    }


def periods_closed(state: dict[str, Any], horizon: int) -> int:
    """A state's ``periods_closed``, or :class:`StateError` unless it is in ``0..horizon``."""
    closed = state["periods_closed"]
    if not isinstance(closed, int) or not 0 <= closed <= horizon:
        raise StateError(f"periods_closed must be in 0..{horizon}, got {closed!r}")
    return closed


def check_state_header(
    state: dict[str, Any], kind: str, version: int, what: str, sampler: NoiseSampler
) -> None:
    """Raise :class:`StateError` unless ``state`` is a ``what`` state (``kind``, ``version``)
    made with a sampler of the same security as ``sampler``; :class:`KeyError` or
    :class:`TypeError` if its ``sampler`` record is missing or malformed (the caller reports
    the state as malformed)."""
    if state.get("kind") != kind or state.get("version") != version:
        raise StateError(
            f"not a {what} state of version {version} "
            f"(kind={state.get('kind')!r}, version={state.get('version')!r})"
        )
    recorded = state["sampler"]
    if bool(recorded["secure"]) != bool(sampler.secure):
        raise StateError(
            f"state was produced with sampler {recorded['name']!r} "
            f"(secure={recorded['secure']}); restoring with {sampler.name!r} "
            f"(secure={sampler.secure}) is refused: use a sampler of the same kind"
        )
