"""Stream specs: the examples load, errors name stream/field/problem/allowed values, the
per-source epsilon cap is enforced with exact decimal arithmetic."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from streamdp.engine import parse_spec
from streamdp.engine.periods import PeriodClock
from streamdp.engine.spec import PeriodSpec
from streamdp.errors import ConfigError
from streamdp.synth import SCENARIOS, example_spec

GOOD = """
[sources.s]
topic = "t"
kind = "person"
epsilon_cap = {cap}

[streams.a]
source = "s"
epsilon = {ea}
sensitivity = 1
horizon = 12
period = {{ unit = "month", timezone = "UTC", start = "2024-01-01" }}
counters = {{ kind = "flag", field = "hiv_positive" }}

[streams.b]
source = "s"
epsilon = {eb}
sensitivity = 1
horizon = 12
period = {{ unit = "month", timezone = "UTC", start = "2024-01-01" }}
counters = {{ kind = "flag", field = "other" }}
"""


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_examples_load(scenario) -> None:
    spec = example_spec(scenario)
    assert spec.streams
    for stream in spec.streams.values():
        assert stream.source in spec.sources


def test_seed_shapes() -> None:
    restaurant = example_spec("restaurant").streams["restaurant-items"]
    assert restaurant.sensitivity == 5
    assert [v for _, v in restaurant.constraints.combos] == [
        (2, 1, 1, 0, 1),
        (0, 2, 2, 1, 0),
        (1, 1, 0, 1, 1),
    ]
    census = example_spec("census").streams["census"]
    assert census.sensitivity == len(census.counters.attributes) + 2
    assert census.counters.width == 1 + (2 + 7 + 23) + 2 * 7 * 23


def test_exact_decimal_cap_accepts_point_one_plus_point_two() -> None:
    spec = parse_spec(GOOD.format(cap="0.3", ea="0.1", eb="0.2"))
    assert sum(s.epsilon for s in spec.streams.values()) == Decimal("0.3")
    assert 0.1 + 0.2 > 0.3  # what float arithmetic would have refused


def test_cap_exceeded_names_streams_and_sum() -> None:
    with pytest.raises(ConfigError) as info:
        parse_spec(GOOD.format(cap="0.3", ea="0.1", eb="0.25"))
    message = str(info.value)
    assert "source 's'" in message
    assert "a (0.1) + b (0.25) = 0.35" in message
    assert "cap 0.3" in message


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("epsilon = 0.1", "epsilon = -1"), "stream 'a': field 'epsilon': must be a positive"),
        (
            (
                'sensitivity = 1\nhorizon = 12\nperiod = { unit = "month", timezone = "UTC"',
                'sensitivity = 1\nhorizon = 0\nperiod = { unit = "month", timezone = "UTC"',
            ),
            "field 'horizon': must be between 1 and",
        ),
        (
            ('timezone = "UTC"', 'timezone = "Mars/Olympus"'),
            "field 'period.timezone': must be an IANA",
        ),
        (
            (
                'start = "2024-01-01" }\ncounters = { kind = "flag", field = "hiv',
                'start = "2024-01-15" }\ncounters = { kind = "flag", field = "hiv',
            ),
            "monthly periods start on the 1st",
        ),
        (
            ("epsilon = 0.1", 'epsilon = 0.1\nmechanism = "fancy"'),
            (
                "field 'mechanism': must be one of fda, binary, naive, kary_digits, kary_gls, blt; "
                "got 'fancy'"
            ),
        ),
        (("epsilon = 0.1", "epsilon = 0.1\nepsilom = 1"), "field 'epsilom': unknown key"),
        (
            ('source = "s"\nepsilon = 0.1', 'source = "nope"\nepsilon = 0.1'),
            "field 'source': unknown source 'nope'; configured: s",
        ),
        (('kind = "person"', 'kind = "order"'), "'flag' counters need a source of person events"),
        (("epsilon = 0.1\nsensitivity = 1\n", "epsilon = 0.1\n"), "field 'sensitivity': missing"),
    ],
)
def test_errors_say_where_what_and_what_is_allowed(change, expected) -> None:
    text = GOOD.format(cap="1", ea="0.1", eb="0.2")
    old, new = change
    assert old in text
    with pytest.raises(ConfigError, match=r"^<string>: ") as info:
        parse_spec(text.replace(old, new, 1))
    assert expected in str(info.value)


def test_census_sensitivity_must_cover_k_plus_two_and_combos_the_largest_combo() -> None:
    census = example_spec("census").raw
    text = (
        __import__("importlib.resources", fromlist=["files"])
        .files("streamdp")
        .joinpath("examples", "census.toml")
        .read_text("utf-8")
    )
    assert census
    with pytest.raises(ConfigError, match=r"k \+ 2.*set sensitivity = 5"):
        parse_spec(text.replace("sensitivity = 5", "sensitivity = 4"))
    restaurant = (
        __import__("importlib.resources", fromlist=["files"])
        .files("streamdp")
        .joinpath("examples", "restaurant.toml")
        .read_text("utf-8")
    )
    with pytest.raises(ConfigError, match="largest combo holds 5 units"):
        parse_spec(restaurant.replace("sensitivity = 5", "sensitivity = 4"))
    with pytest.raises(ConfigError, match="unknown item; the stream counts cola"):
        parse_spec(restaurant.replace("combo2 = { burger", "combo2 = { pizza = 1, burger"))
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse_spec(restaurant + "\n[[[")


def test_daylight_saving_days_and_month_bounds() -> None:
    clock = PeriodClock(PeriodSpec(unit="day", start="2024-03-01", timezone="Europe/London"))
    tz = ZoneInfo("Europe/London")
    # 2024-03-31 (index 30) lasts 23 hours, 2024-10-27 (index 240) 25 hours
    lo, hi = clock.bounds(30)
    assert hi - lo == 23 * 3600
    lo, hi = clock.bounds(240)
    assert hi - lo == 25 * 3600
    for j in (0, 29, 30, 31, 239, 240, 241):
        lo, hi = clock.bounds(j)
        assert clock.index_of(lo) == j
        assert clock.index_of(hi - 1e-3) == j
        assert dt.datetime.fromtimestamp(lo, tz).time() == dt.time(0, 0)
    months = PeriodClock(PeriodSpec(unit="month", start="2023-11-01", timezone="UTC"))
    lo, hi = months.bounds(3)  # February 2024, a leap year
    assert (hi - lo) == 29 * 86400
    assert months.index_of(lo) == 3
    assert months.index_of(lo - 1) == 2
    assert months.index_of(months.bounds(0)[0] - 1) < 0


TWO_SOURCES = """
[sources.a]
topic = "{topic_a}"
kind = "person"
epsilon_cap = 1

[sources.b]
topic = "{topic_b}"
kind = "person"
epsilon_cap = 1

[streams.from-a]
source = "a"
epsilon = 1
sensitivity = 1
horizon = 12
period = {{ unit = "month", timezone = "UTC", start = "2024-01-01" }}
counters = {{ kind = "flag", field = "hiv_positive" }}

[streams.from-b]
source = "b"
epsilon = 1
sensitivity = 1
horizon = 12
period = {{ unit = "month", timezone = "UTC", start = "2024-01-01" }}
counters = {{ kind = "flag", field = "hiv_positive" }}
"""


@pytest.mark.parametrize(("topic_a", "topic_b"), [("b", "a"), ("b", "c"), ("c", "a")])
def test_a_source_named_like_another_sources_topic_is_refused(topic_a: str, topic_b: str) -> None:
    """Issue 25: with source a reading topic b and b reading a, a replay counted records
    naming a in b's streams (names and topics map to sources in one table)."""
    with pytest.raises(ConfigError, match=r"its name is the topic of source") as info:
        parse_spec(TWO_SOURCES.format(topic_a=topic_a, topic_b=topic_b))
    assert "rename the source or the topic" in str(info.value)


def test_a_source_may_be_named_like_its_own_topic() -> None:
    spec = parse_spec(TWO_SOURCES.format(topic_a="a", topic_b="b-topic"))
    assert spec.source_of_topic("a") is spec.sources["a"]
    assert spec.source_of_topic("b-topic") is spec.sources["b"]
    assert spec.source_of_topic("b") is spec.sources["b"]


def test_a_source_no_stream_reads_is_refused() -> None:
    """Its records were read and reported as accepted by --check-input (and counted
    nowhere): a spec typo (a stream naming the wrong source) looked like a working feed."""
    text = TWO_SOURCES.format(topic_a="a", topic_b="b").replace('source = "b"', 'source = "a"')
    with pytest.raises(ConfigError, match=r"source 'b': no stream reads it") as info:
        parse_spec(text)
    assert "add a stream with source = 'b' or remove the [sources.b] table" in str(info.value)


WORDED = GOOD.format(cap="1.0", ea="0.5", eb="0.5").replace(
    "[streams.a]\n",
    '[streams.a]\ntitle = "HIV-positive admissions"\n'
    'description = "Admissions of patients recorded as HIV-positive.\\nMonthly."\n'
    'unit = "admissions"\n',
)


def test_a_streams_wording_is_read_and_left_out_of_the_fingerprint() -> None:
    plain = parse_spec(GOOD.format(cap="1.0", ea="0.5", eb="0.5"))
    worded = parse_spec(WORDED)
    about = worded.streams["a"].about
    assert about.title == "HIV-positive admissions"
    assert about.description == "Admissions of patients recorded as HIV-positive.\nMonthly."
    assert about.fields() == {
        "title": "HIV-positive admissions",
        "description": "Admissions of patients recorded as HIV-positive.\nMonthly.",
        "unit": "admissions",
    }
    assert plain.streams["a"].about.fields() == {}
    # rewording restores state; any other change does not
    assert worded.fingerprints() == plain.fingerprints()
    assert parse_spec(WORDED.replace("horizon = 12", "horizon = 13", 1)).fingerprint() != (
        plain.fingerprint()
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('title = ""', "field 'title': must be non-empty text"),
        ("unit = 3", "field 'unit': must be non-empty text, got 3"),
        ('title = "two\\nlines"', "field 'title': holds a control character"),
        ('description = "bell\\u0007"', "line breaks are allowed here"),
        (f'unit = "{"u" * 41}"', "field 'unit': is 41 characters; at most 40 are allowed"),
    ],
)
def test_bad_wording_is_refused_with_the_field_and_the_rule(line: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)):
        parse_spec(
            GOOD.format(cap="1.0", ea="0.5", eb="0.5").replace(
                "[streams.a]\n", f"[streams.a]\n{line}\n"
            )
        )
