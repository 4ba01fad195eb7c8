"""Budgets add exactly at any number of digits, one source never mixes definitions, and the
zCDP -> (epsilon, delta) conversion rounds up at every step (audit of 2026-11-28).

Python's default decimal context keeps 28 digits and rounds to nearest: two streams of rho
0.2500000000000000000000000000001 on a source capped at 0.5 summed to exactly 0.5 and were
accepted, 2e-31 over the cap, by the spec check and by the ledger. A ledger loaded from a
backend took an epsilon entry into a rho source's total.
"""

from __future__ import annotations

import math
from decimal import Context, Decimal
from fractions import Fraction

import pytest

from streamdp.continual.definitions import zcdp_epsilon
from streamdp.engine import BudgetLedger, parse_spec
from streamdp.engine.ledger import MemoryLedgerBackend, exact_sum
from streamdp.errors import BudgetError, ConfigError, StateError

OVER = "0.2500000000000000000000000000001"  # 31 significant digits; two of them exceed 0.5
#: the same in the 15 significant digits a spec's rho may have
OVER_IN_A_SPEC = "0.250000000000001"

TWO_STREAMS = """
[sources.s]
topic = "t"
kind = "person"
rho_cap = 0.5
""" + "".join(
    f"""
[streams.{name}]
source = "s"
privacy = {{ definition = "zcdp", rho = "{OVER_IN_A_SPEC}" }}
mechanism = "binary"
sensitivity = 1
horizon = 12
period = {{ unit = "month", timezone = "UTC", start = "2024-01-01" }}
counters = {{ kind = "flag", field = "hiv_positive" }}
"""
    for name in ("f", "g")
)


def test_exact_sum_never_rounds() -> None:
    assert sum([Decimal(OVER)] * 2, Decimal(0)) == Decimal("0.5")  # the default context rounds
    assert exact_sum([Decimal(OVER)] * 2) == Decimal("0.5000000000000000000000000000002")
    assert exact_sum([Decimal("1e-400"), Decimal("1e400")]) > Decimal("1e400")


def test_a_spec_a_hair_over_its_rho_cap_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"over its rho_cap 0\.5"):
        parse_spec(TWO_STREAMS)


@pytest.mark.parametrize(
    ("rho", "refusal"),
    [
        (OVER, "has 31 significant digits; at most 15"),
        ("1e400", "must lie between 1e-300 and 1e300"),
        ("1e-400", "must lie between 1e-300 and 1e300"),
    ],
)
def test_a_rho_the_maths_cannot_read_exactly_is_refused_at_load(rho: str, refusal: str) -> None:
    """An audit found rho unlimited where epsilon has 15 significant digits: a release record
    states rho as the nearest float, which read back below the rho spent; and rho = 1e400 hung
    the sigma search, then overflowed. Both are refused with the field named."""
    one = TWO_STREAMS.split("[streams.g]")[0].replace(OVER_IN_A_SPEC, rho)
    one = one.replace("rho_cap = 0.5", "rho_cap = 1e400")
    with pytest.raises(ConfigError, match=rf"privacy\.rho.*{refusal}"):
        parse_spec(one)


def test_an_epsilon_of_more_than_28_digits_is_counted_as_written() -> None:
    """The digit count used ``Decimal.normalize()``, which rounds to the context's 28 digits
    first: a 31-digit epsilon counted as 2 digits and was accepted."""
    pure = (
        TWO_STREAMS.split("[streams.g]")[0]
        .replace("rho_cap = 0.5", "epsilon_cap = 1")
        .replace(f'privacy = {{ definition = "zcdp", rho = "{OVER_IN_A_SPEC}" }}',
                 f'epsilon = "{OVER}"')
    )  # fmt: skip
    assert f'epsilon = "{OVER}"' in pure
    with pytest.raises(ConfigError, match=r"epsilon.*has 31 significant digits"):
        parse_spec(pure)


def test_the_ledger_refuses_a_spend_a_hair_over_the_cap() -> None:
    ledger = BudgetLedger({"s": Decimal("0.5")}, MemoryLedgerBackend(), units={"s": "rho"})
    assert ledger.record_epoch("s", "f", 0, Decimal(OVER))
    with pytest.raises(BudgetError, match=r"over its cap 0\.5"):
        ledger.record_epoch("s", "g", 0, Decimal(OVER))
    assert ledger.spent("s") == Decimal(OVER)


def test_a_streams_next_epoch_at_the_cap_is_counted_exactly() -> None:
    """The ledger took the stream's previous spend off with a unary minus, which rounds to
    the default 28 digits: a 30-digit spend exactly at the cap was refused at its second
    epoch (spent - round(previous) + previous came out 1e-29 over)."""
    spend = Decimal("0.50000000000000000000000000001")  # 29 significant digits
    ledger = BudgetLedger({"s": spend}, MemoryLedgerBackend())
    assert ledger.record_epoch("s", "f", 0, spend)
    assert ledger.record_epoch("s", "f", 1, spend)  # epochs compose in parallel
    assert ledger.spent("s") == spend


def test_the_headroom_metrics_read_is_exact() -> None:
    from streamdp.budget_view import SourceBudget, StreamBudget

    cap, spent = Decimal(1), Decimal("0.50000000000000000000000000001")
    assert SourceBudget("s", cap, spent).epsilon_headroom == Decimal(
        "0.49999999999999999999999999999"
    )
    assert StreamBudget("f", "s", cap, spent).next_epoch_epsilon == Decimal(
        "0.49999999999999999999999999999"
    )


def test_a_restored_ledger_over_its_cap_is_refused_at_restore() -> None:
    """An audit restored a snapshot spending 1.8 against a cap of 1: accepted (every later
    spend then refused). The restore now says so; the entries stay recorded (they were spent)."""
    spent = BudgetLedger({"s": Decimal(2)}, MemoryLedgerBackend())
    spent.record_epoch("s", "f", 0, Decimal("0.9"))
    spent.record_epoch("s", "g", 0, Decimal("0.9"))
    backend = MemoryLedgerBackend()
    restored = BudgetLedger({"s": Decimal(1)}, backend)
    with pytest.raises(StateError, match=r"spends epsilon 1\.8 on source 's', over its cap 1"):
        restored.merge(spent.state())
    assert exact_sum(Decimal(str(e["epsilon"])) for e in backend.load()) == Decimal("1.8")
    within = BudgetLedger({"s": Decimal(2)}, MemoryLedgerBackend())
    within.merge(spent.state())  # at or under the cap: restored
    assert within.spent("s") == Decimal("1.8")


def test_a_ledger_entry_in_the_other_definitions_unit_is_refused() -> None:
    backend = MemoryLedgerBackend()
    BudgetLedger({"s": Decimal(3)}, backend).record_epoch("s", "f", 0, Decimal(3))  # epsilon
    with pytest.raises(StateError, match="spends epsilon on source 's', whose budget is in rho"):
        BudgetLedger({"s": Decimal(5)}, backend, units={"s": "rho"})


_FLOOR = Context(prec=200, rounding="ROUND_FLOOR")


def _below_bound(rho: Fraction, delta: Fraction) -> Decimal:
    """rho + 2 sqrt(rho ln(1/delta)), every step rounded DOWN at 200 digits: a value at or
    below the exact bound, so a conversion under it would claim less loss than the bound."""
    c = _FLOOR
    r = c.divide(Decimal(rho.numerator), Decimal(rho.denominator))
    d_up = Context(prec=200, rounding="ROUND_CEILING").divide(
        Decimal(delta.numerator), Decimal(delta.denominator)
    )
    return c.add(r, c.multiply(2, c.sqrt(c.multiply(r, c.ln(c.divide(1, d_up))))))


@pytest.mark.parametrize(
    ("rho", "delta"),
    [
        (Fraction(1, 3), Fraction(1, 10**10)),
        (Fraction(2, 7), Fraction(1, 3 * 10**6)),
        (Fraction(10**-9).limit_denominator(10**12), Fraction(1, 7 * 10**5)),
        (Fraction(123456789, 10**8), Fraction(1, 10**15)),
        (Fraction(1, 2), Fraction(1, 10**10)),
    ],
)
def test_the_conversion_is_never_below_the_bound_with_inexact_inputs(
    rho: Fraction, delta: Fraction
) -> None:
    converted = zcdp_epsilon(rho, delta)
    assert Decimal(converted) >= _below_bound(rho, delta)
    exact = float(rho) + 2 * math.sqrt(float(rho) * math.log(1 / float(delta)))
    assert converted == pytest.approx(exact, rel=1e-13)


def test_the_feed_shows_a_sum_of_budgets_never_below_it() -> None:
    """The feed's summed losses are exact sums shown as the float whose printed decimal is the
    nearest at or above them (budget fields are read as the decimals they print as)."""
    from streamdp.feed.privacy_loss import _shown_at_least

    assert _shown_at_least(Decimal("0.6")) == 0.6
    two = exact_sum([Decimal(OVER)] * 2)
    assert Decimal(repr(_shown_at_least(two))) >= two > Decimal("0.5")


def test_a_zcdp_stream_without_a_mechanism_is_told_the_default_is_fda() -> None:
    """An audit's zCDP spec without ``mechanism`` read "'fda' does not run under zCDP", a
    mechanism the user never wrote."""
    text = TWO_STREAMS.split("[streams.g]")[0].replace('mechanism = "binary"\n', "")
    assert "mechanism" not in text
    with pytest.raises(ConfigError, match=r"'fda' \(the default when none is given\) does not"):
        parse_spec(text)
