"""zCDP streams in the engine (issue 27): the spec's privacy table and rho caps, refused mixes,
the kinds' L2 bounds, the ledger in rho, and release records that say the definition, rho,
delta, the (epsilon, delta) bound and the L2 bound, validated against the schema."""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import jsonschema
import pytest

from streamdp.continual.definitions import zcdp_epsilon
from streamdp.engine import Engine, load_spec, parse_spec
from streamdp.engine.replay import read_jsonl, replay
from streamdp.errors import ConfigError
from streamdp.kinds import stream_kind
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec, generate, release_instant

ROOT = Path(__file__).resolve().parents[1]
CENSUS_ZCDP = ROOT / "streamdp" / "examples" / "census_zcdp.toml"

FLAG = """
[sources.s]
topic = "t"
kind = "person"
rho_cap = 0.5

[streams.f]
source = "s"
privacy = {{ definition = "zcdp", rho = {rho} }}
mechanism = "binary"
sensitivity = 1
horizon = 12
period = {{ unit = "month", timezone = "UTC", start = "2024-01-01" }}
counters = {{ kind = "flag", field = "hiv_positive" }}
"""


def test_the_census_example_runs_under_zcdp_with_its_l2_bound() -> None:
    spec = load_spec(CENSUS_ZCDP)
    stream = spec.streams["census"]
    assert stream.definition == "zcdp"
    assert (stream.rho, stream.delta, stream.budget) == (
        Decimal("0.5"), Decimal("1e-10"), Decimal("0.5"),
    )  # fmt: skip
    assert stream.l2_squared == 5  # k + 2 counters moved by one record
    assert stream.sensitivity == 5  # the L1 bound the extractor enforces is unchanged
    assert float(stream.epsilon) >= zcdp_epsilon(Fraction(1, 2), Fraction(1, 10**10))
    assert float(stream.epsilon) == pytest.approx(7.2861404244, rel=1e-10)
    assert spec.sources["census-records"].definition == "zcdp"
    assert spec.sources["census-records"].cap == Decimal("0.5")


def test_default_delta_is_1e_10_and_streams_on_a_source_add_their_rhos() -> None:
    spec = parse_spec(FLAG.format(rho="0.2"))
    assert spec.streams["f"].delta == Decimal("1e-10")
    two = FLAG.format(rho="0.3") + FLAG.format(rho="0.3").split("[streams.f]")[1].join(
        ["[streams.g]", ""]
    )
    with pytest.raises(
        ConfigError, match=r"spend rho f \(0.3\) \+ g \(0.3\) = 0.6, over its rho_cap"
    ):
        parse_spec(two)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("rho_cap = 0.5", "epsilon_cap = 1.0"), "source 's' caps epsilon (pure DP)"),
        (("rho_cap = 0.5", "rho_cap = 0.5\nepsilon_cap = 1.0"), "give exactly one cap"),
        (("rho_cap = 0.5", ""), "give exactly one cap"),
        (('privacy = { definition = "zcdp", rho = 0.5 }', "epsilon = 1.0"),
         "source 's' caps rho (zCDP)"),
        (('privacy = { definition = "zcdp", rho = 0.5 }',
          'privacy = { definition = "zcdp", rho = 0.5 }\nepsilon = 1.0'),
         "spends rho, not epsilon"),
        (('definition = "zcdp"', 'definition = "renyi"'), "must be one of zcdp"),
        (("rho = 0.5", "rho = 0"), "privacy.rho"),
        (("rho = 0.5", "rho = 0.5, delta = 1.5"), "must be below 1"),
        (("rho = 0.5", "rh0 = 0.5"), "unknown key"),
        (('mechanism = "binary"', 'mechanism = "kary_digits"'), "does not run under zCDP"),
        (('mechanism = "binary"', 'mechanism = "kary_gls"\nobjective = "count"'),
         "'count' is not tuned under zCDP"),
        (("rho = 0.5", "rho = 1e30"), "safe range"),
    ],
)  # fmt: skip
def test_mixed_or_malformed_zcdp_configurations_are_refused(
    change: tuple[str, str], message: str
) -> None:
    text = FLAG.format(rho="0.5").replace(*change)
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_spec(text)


def test_each_kind_states_its_l2_bound() -> None:
    restaurant = example_spec("restaurant").streams["restaurant-items"]
    kind = stream_kind("items")
    # combos {cola 2, burger 1, wings 1, nuggets 1}, {burger 2, wings 2, fries 1}, {...}:
    # the largest sum of squares is 2^2 + 2^2 + 1 = 9
    assert kind.l2_squared_bound(restaurant.counters, restaurant.constraints, 5) == 9
    loose = type(restaurant.constraints)("none")
    assert kind.l2_squared_bound(restaurant.counters, loose, 5) == 25  # all units on one item
    census = example_spec("census").streams["census"]
    assert stream_kind("attributes").l2_squared_bound(census.counters, census.constraints, 5) == 5
    hiv = example_spec("hiv").streams["hiv-monthly"]
    assert stream_kind("flag").l2_squared_bound(hiv.counters, hiv.constraints, 1) == 1


def test_a_zcdp_replay_records_rho_and_says_so_in_every_release(tmp_path: Path) -> None:
    spec = load_spec(CENSUS_ZCDP)
    events = tmp_path / "events.jsonl"
    events.write_text(
        "".join(line.text + "\n" for line in generate("census", 4, 10, seed=3, spec=spec))
    )
    replay(
        spec, events, tmp_path / "out", as_of=release_instant(spec, 4),
        sampler=InsecureSeededSampler(2),
    )  # fmt: skip
    ledger = read_jsonl(tmp_path / "out" / "ledger.jsonl")
    assert ledger == [{"epoch": 0, "rho": "0.5", "seq": 1, "source": "census-records",
                       "stream": "census"}]  # fmt: skip
    schema = json.loads((ROOT / "schemas" / "release.schema.json").read_text())
    releases = read_jsonl(tmp_path / "out" / "releases.jsonl")
    assert len(releases) == 4 * spec.streams["census"].counters.width
    for record in releases:
        jsonschema.validate(record, schema)
        assert record["privacy_definition"] == "zcdp"
        assert (record["rho"], record["privacy_delta"]) == (0.5, 1e-10)
        assert record["l2_sensitivity"] == math.sqrt(5)
        assert record["sensitivity"] == 5
        assert record["epsilon"] == pytest.approx(7.2861404244, rel=1e-10)
        assert record["noise"] == "insecure-seeded-numpy-gaussian"
        assert record["mechanism"] == "blt"
    # projected onto the hierarchy at publication: consistent when released
    period_1 = {r["counter"]: r["noisy_total"] for r in releases if r["period"] == 1}
    female, male = period_1["sex=female"], period_1["sex=male"]
    assert female + male == pytest.approx(period_1["total"], abs=1e-6)
    first = releases[0]
    # a zCDP release without its fields is refused by the schema
    broken = {k: v for k, v in first.items() if k != "rho"}
    assert not jsonschema.Draft202012Validator(schema).is_valid(broken)


def test_the_binary_tree_declares_sigma_squared_per_level() -> None:
    """sigma^2 = l2^2 / (2 rho / levels): N = 12 has 4 Fenwick levels with equal shares, and
    at this sigma the discrete Gaussian's variance is sigma^2 to float precision."""
    spec = parse_spec(FLAG.format(rho="0.5"))
    engine = Engine(spec, sampler=InsecureSeededSampler(1))
    out = engine.advance_clock(release_instant(spec, 1))
    first = json.loads(out[0].to_json())
    assert first["total_std"] == pytest.approx(math.sqrt(1 * 4 / (2 * 0.5)), rel=1e-9)
    assert isinstance(first["noisy_total"], int)  # sums of integer noisy nodes


def test_the_ledger_of_a_zcdp_source_counts_rho_and_its_state_says_so() -> None:
    spec = parse_spec(FLAG.format(rho="0.5").replace("horizon = 12", "horizon = 2"))
    engine = Engine(spec, sampler=InsecureSeededSampler(1))
    engine.advance_clock(release_instant(spec, 2))
    assert engine.epsilon_spent() == {"s": Decimal("0.5")}
    assert engine.ledger.units == {"s": "rho"}
    assert engine.ledger.state() == [{"source": "s", "stream": "f", "rho": "0.5", "epochs": [0, 0]}]


def test_status_names_the_gaussian_noise_and_the_l2_bound_of_a_zcdp_stream() -> None:
    """/status said ``noise.sampler: opendp-discrete-laplace`` and only the L1 sensitivity for
    a census stream whose noise is a discrete Gaussian calibrated on sqrt 5 (an audit)."""
    from streamdp.daemon.runtime import WorkerRuntime
    from streamdp.daemon.settings import DaemonSettings
    from streamdp.metrics import StreamdpMetrics

    runtime = WorkerRuntime(
        DaemonSettings(config=CENSUS_ZCDP),
        load_spec(CENSUS_ZCDP),
        InsecureSeededSampler(1),
        StreamdpMetrics(),
    )
    status = runtime.status()
    census = status["streams"]["census"]
    assert census["sensitivity"] == 5  # the L1 bound the extractor enforces
    assert census["l2_sensitivity"] == math.sqrt(5)  # what the noise is calibrated on
    assert census["noise"] == "insecure-seeded-numpy-gaussian"
    assert status["noise"]["draws"] == ["insecure-seeded-numpy-gaussian"]
    assert status["noise"]["sampler"] == "insecure-seeded-numpy"
