"""A stream's privacy definition and the limits of its noise, as read from its spec table.

``privacy = { definition = "zcdp", rho = R, delta = D }`` or a pure ``epsilon`` (the definition
must be its source's); an epsilon, rho or Delta whose exact noise scales leave the sampler's
safe range is refused at load, naming the field, never at the first draw.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_CEILING, ROUND_DOWN, Context, Decimal
from typing import Any

from streamdp.engine.config_reader import ConfigReader
from streamdp.engine.spec import Mechanism, Objective, SourceSpec
from streamdp.errors import ConfigError

_PRIVACY_KEYS = ("definition", "rho", "delta")
#: Significant digits of a stream's epsilon that the noise maths reads exactly (float's DBL_DIG).
EPSILON_DIGITS = 15


def read_privacy(
    ctx: ConfigReader, table: Mapping[str, Any], source: SourceSpec
) -> tuple[Decimal | None, Decimal | None]:
    """``(rho, delta)`` of a zCDP stream (``privacy = { definition = "zcdp", rho = R,
    delta = D }``, delta 1e-10 unless given), ``(None, None)`` for a pure-DP one; either way
    the definition must be its source's."""
    if "privacy" not in table:
        if source.definition == "zcdp":
            raise ctx.fail(
                "privacy",
                f"missing: source {source.name!r} caps rho (zCDP), so its streams say "
                'privacy = { definition = "zcdp", rho = ... } instead of epsilon',
            )
        return None, None
    privacy = ctx.table(table["privacy"], "privacy")
    ctx.only(privacy, _PRIVACY_KEYS, "privacy")
    definition = ctx.choice(privacy.get("definition"), "privacy.definition", ("zcdp",))
    if "epsilon" in table:
        raise ctx.fail(
            "epsilon",
            f"a {definition} stream spends rho, not epsilon; drop epsilon (its (epsilon, delta) "
            "bound is reported from rho)",
        )
    if source.definition != "zcdp":
        raise ctx.fail(
            "privacy",
            f"source {source.name!r} caps epsilon (pure DP); a zCDP stream needs a source with "
            "rho_cap (the losses of two definitions do not add)",
        )
    if "rho" not in privacy:
        raise ctx.fail("privacy.rho", "missing: the zCDP budget per epoch, e.g. 0.5")
    rho = _read_exactly(ctx, privacy["rho"], "privacy.rho")
    delta = _read_exactly(ctx, privacy.get("delta", Decimal("1e-10")), "privacy.delta")
    if delta >= 1:
        raise ctx.fail("privacy.delta", f"must be below 1, got {delta}")
    return rho, delta


def significant_digits(number: Decimal) -> int:
    """Significant digits of ``number`` as written, trailing zeros dropped. (``normalize()``
    rounds to the context's 28 digits first: 0.2500000000000000000000000000001 counted 2.)"""
    digits = "".join(map(str, number.as_tuple().digits)).strip("0")
    return max(len(digits), 1)


def _read_exactly(ctx: ConfigReader, value: Any, field_name: str) -> Decimal:
    """A positive decimal the noise maths and the records read exactly: at most
    ``EPSILON_DIGITS`` significant digits (a release record states it as a float, which must
    not read below the rho spent) and within the floats' normal range (an audit's rho = 1e400
    hung the sigma search, then overflowed)."""
    number = ctx.epsilon(value, field_name)
    digits = significant_digits(number)
    if digits > EPSILON_DIGITS:
        raise ctx.fail(
            field_name,
            f"has {digits} significant digits; at most {EPSILON_DIGITS} are read exactly by the "
            f"noise maths and the release records: round it (e.g. to "
            f"{_round_down(number, EPSILON_DIGITS)})",
        )
    if not Decimal("1e-300") <= number <= Decimal("1e300"):
        raise ctx.fail(field_name, f"must lie between 1e-300 and 1e300, got {number}")
    return number


def zcdp_epsilon_bound(rho: Decimal, delta: Decimal | None) -> Decimal:
    """The (epsilon, delta) bound of ``rho`` as an exact decimal rounded up (reports only)."""
    from fractions import Fraction

    from streamdp.continual.definitions import zcdp_epsilon

    assert delta is not None
    bound = zcdp_epsilon(Fraction(rho), Fraction(delta))
    return Context(prec=EPSILON_DIGITS, rounding=ROUND_CEILING).plus(Decimal(bound))


def check_gaussian_limits(  # noqa: PLR0917 - the stream's noise parameters
    ctx: ConfigReader,
    rho: Decimal,
    l2_squared: int,
    mechanism: str,
    objective: str,
    horizon: int,
    branching: int | None,
    touched: int,
) -> None:
    """Refuse a rho whose node (or level) sigmas leave the discrete Gaussian sampler's safe
    range; a kary_gls stream's level budgets are tuned here once (cached for the worker).
    ``touched``: the most counters one event (or unit) changes (a blt stream's sigma covers
    the lattice's rounding on each; :func:`~streamdp.continual.lattice_blt.counters_touched`)."""
    from fractions import Fraction

    from streamdp.continual.factored_noise import level_sigmas
    from streamdp.continual.gaussian_budgets import GaussianBudget, gaussian_node_sigmas
    from streamdp.continual.kary_gaussian import optimise_gaussian_gls
    from streamdp.continual.strategy import build_strategy

    budget = GaussianBudget(Fraction(rho), l2_squared)
    try:
        if mechanism == "kary_gls":
            level_sigmas(optimise_gaussian_gls(horizon, objective, branching), budget)
        elif mechanism == "blt":
            from streamdp.continual.blt_counter import blt_strategy
            from streamdp.continual.lattice_blt import lattice_sigma

            lattice = blt_strategy(horizon, objective).lattice
            lattice_sigma(lattice, horizon, budget.rho, l2_squared, touched)
        else:
            gaussian_node_sigmas(build_strategy(mechanism, objective, horizon), budget)
    except ConfigError as error:
        raise ctx.fail("privacy.rho", str(error)) from None


def _round_down(value: Decimal, digits: int) -> Decimal:
    return Context(prec=digits, rounding=ROUND_DOWN).plus(value)


def check_noise_limits(  # noqa: PLR0917 - the stream's noise parameters
    ctx: ConfigReader,
    epsilon: Decimal,
    sensitivity: int,
    mechanism: Mechanism,
    objective: Objective,
    horizon: int,
    branching: int | None = None,
) -> None:
    """Refuse an epsilon or Delta whose exact noise scales leave the sampler's safe range
    (2^-40 .. 2^40 counts; see streamdp.noise.sampler.MAX_NOISE_SCALE)."""
    from streamdp.continual.privacy import MAX_SENSITIVITY
    from streamdp.continual.strategy import check_noise_scales

    digits = significant_digits(epsilon)
    if digits > EPSILON_DIGITS:
        raise ctx.fail(
            "epsilon",
            f"has {digits} significant digits; at most {EPSILON_DIGITS} are read exactly by the "
            f"noise maths: round it down (e.g. to {_round_down(epsilon, EPSILON_DIGITS)})",
        )
    if sensitivity > MAX_SENSITIVITY:  # a privacy unit's: Delta times its events per epoch
        raise ctx.fail(
            "sensitivity",
            f"the contribution bound {sensitivity} (for a privacy unit, sensitivity times "
            f"max_events_per_period times max_periods_per_epoch) must be at most 2^40 = "
            f"{MAX_SENSITIVITY}; lower it",
        )
    try:
        check_noise_scales(mechanism, objective, horizon, epsilon, sensitivity, branching)
    except ConfigError as error:  # the scale depends on both: the message names both
        raise ctx.fail("epsilon", str(error)) from None
