"""The public records of one closed period: a release per counter, with the standard deviation
it declares (scaled per counter by ``sqrt(P_jj)`` when the noise was projected onto the
constraint span at publication)."""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import numpy.typing as npt

from streamdp.continual.bank import BankRelease
from streamdp.engine.counter_fields import CounterFields
from streamdp.engine.periods import PeriodClock
from streamdp.engine.release_record import ReleaseContext, ReleaseRecord
from streamdp.engine.spec import StreamSpec
from streamdp.noise.sampler import NoiseSampler

FloatArray = npt.NDArray[np.float64]


def scaled_stds(std: float | FloatArray, scale: FloatArray | None, width: int) -> list[float]:
    """``std`` per counter (``width`` of them; one for all, or one each), times ``scale``
    (``sqrt(P_jj)``) when given."""
    if scale is None:
        if isinstance(std, np.ndarray):
            each: list[float] = std.astype(np.float64).tolist()
            return each
        return [float(std)] * width
    out: list[float] = (std * scale).tolist()
    return out


def zcdp_fields(spec: StreamSpec) -> dict[str, object]:
    """A zCDP stream's release fields (issue 27): ``privacy_definition``, ``rho`` per epoch,
    the ``privacy_delta`` the record's ``epsilon`` is stated at (not ``delta``: schema version
    1 used that name for the sensitivity), and ``l2_sensitivity`` (the L2 bound the noise is
    calibrated on: one event's, or one privacy unit's per epoch; ``sensitivity`` stays the L1
    bound). Empty for a pure-DP stream."""
    if spec.rho is None:
        return {}
    return {
        "privacy_definition": "zcdp",
        "rho": float(spec.rho),
        "privacy_delta": float(spec.delta) if spec.delta is not None else None,
        "l2_sensitivity": math.sqrt(spec.l2_squared),
    }


def noise_name(sampler: NoiseSampler, spec: StreamSpec) -> str:
    """The name of the noise a stream's releases are drawn with (their ``noise`` field): the
    sampler's discrete Laplace, or for a zCDP stream its discrete Gaussian."""
    if spec.rho is None:
        return sampler.name
    return str(getattr(sampler, "gaussian_name", sampler.name))


def unit_fields(spec: StreamSpec) -> dict[str, object]:
    """A stream with a privacy unit (issue 28) says so in every release: ``privacy_unit``
    with the field, the bounds and one event's sensitivity (the record's ``sensitivity`` is
    then the unit's). Empty when the stream protects one event."""
    unit = spec.privacy_unit
    if unit is None:
        return {}
    return {
        "privacy_unit": {
            "field": unit.field,
            "max_events_per_period": unit.max_events_per_period,
            "max_periods_per_epoch": unit.max_periods_per_epoch,
            "event_sensitivity": spec.sensitivity,
        }
    }


def stream_fields(spec: StreamSpec) -> dict[str, object]:
    """The optional fields every release of the stream carries: the input ``source`` it reads
    (streams of one source compose: a reader sums their budgets), its ``period_unit`` (a reader
    labels calendar months as months, fixed periods by their dates), its wording, zCDP fields
    and privacy unit."""
    return {
        "source": spec.source,
        "period_unit": spec.period.unit,
        **spec.about.fields(),
        **zcdp_fields(spec),
        **unit_fields(spec),
    }


def release_records(
    spec: StreamSpec,
    clock: PeriodClock,
    sampler: NoiseSampler,
    j: int,
    release: BankRelease,
    *,
    scale: FloatArray | None,
    integral: bool,
    fields: CounterFields | None = None,
) -> list[ReleaseRecord]:
    """The release records of absolute period ``j`` (one per counter, in counter order):
    ``release`` is the counter's noisy close of it, ``scale`` the per-counter ``sqrt(P_jj)``
    of a projected release (None: not projected), ``integral`` whether the mechanism's
    releases are integers, ``fields`` the stream's :class:`CounterFields` (made when not
    given)."""
    names = spec.counters.names
    epoch, index = divmod(j, spec.horizon)
    start, end = clock.bounds(j)
    start_text, end_text = clock.iso(start), clock.iso(end)
    eps = float(spec.epsilon)
    # projected at publication: sqrt(P_jj) per counter
    count_stds = scaled_stds(release.count_std, scale, len(names))
    total_stds = scaled_stds(release.total_std, scale, len(names))
    name = noise_name(sampler, spec)
    secure = bool(sampler.secure)
    # integers for integer mechanisms; k-ary GLS (and any projected) releases are real
    # numbers: rounding them would change the variance they declare
    number = np.int64 if integral else np.float64
    noisy_counts = release.noisy_count.astype(number, copy=False).tolist()
    noisy_totals = release.noisy_total.astype(number, copy=False).tolist()
    context = ReleaseContext(
        stream=spec.name,
        epoch=epoch,
        period=index + 1,
        period_start=start_text,
        period_end=end_text,
        epsilon=eps,
        sensitivity=spec.noise_sensitivity,
        horizon=spec.horizon,
        mechanism=spec.mechanism,
        objective=spec.objective,
        noise=name,
        noise_secure=secure,
        optional_fields=stream_fields(spec),
        counter_fields=CounterFields(spec) if fields is None else fields,
    )
    with _collector_paused():
        return [
            ReleaseRecord(context, *values)
            for values in zip(
                names,
                range(len(names)),
                noisy_counts,
                noisy_totals,
                count_stds,
                total_stds,
                strict=True,
            )
        ]


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off while a close builds its records (none of them in a
    cycle): a million new objects would otherwise set off collections that walk the whole heap
    again and again, about half the close of a 10^6-counter stream
    (benchmarks/places_scale.py). Left off if it was off."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
