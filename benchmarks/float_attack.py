"""The floating-point attack on released k-ary GLS totals (issue 25, Break 1), as a program.

    ./run bench float_attack [--trials 3000] [--window 25] [--write]

A one-flag stream, horizon 2, ``kary_gls`` with ``k = 2`` (three nodes), epsilon 1, through the
real engine with OpenDP's secure sampler. D holds one positive admission in period 1, D' = D
plus one more. The attacker reads the two released running totals (float64) and, for each
hypothesis (D or D'), searches every integer node noise in ``[-window, window]^3`` for one that
reproduces both floats bit for bit through the public release pipeline. A hypothesis no noise
reproduces is refuted: "presence proved" when only D' survives. The 95% lower bound on epsilon
is ``ln(P_D'(proved)_low / P_D(proved)_high)`` (Clopper-Pearson).

Two pipelines are attacked with the same engine draws: today's (releases are the fixed-point
decoding of the noisy nodes, a function of them alone) and the previous one (exact total plus
float64 decoded noise), rebuilt from the engine's stored node noise for comparison. The previous
one gave epsilon >= 5.86 for a claimed 1 in the audit. The true hypothesis must always survive
(a check that the attacker's model of the pipeline is exact).

Prints the table and writes float_attack.md to benchmarks/out/ (with ``--write``: the
committed benchmarks/results/float_attack.md).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from privacy_audit import clopper_pearson  # benchmarks/ is on sys.path when one runs
from results_dir import add_write_flag, output_dir

from streamdp.continual.factored_noise import EpochNoise
from streamdp.continual.fixed_point import fixed_to_float, split_fixed
from streamdp.continual.kary import KaryStrategy
from streamdp.engine import Engine, parse_spec
from streamdp.engine.records import ReleaseRecord
from streamdp.engine.stream import stream_strategy
from streamdp.noise import production_sampler
from streamdp.noise.sampler import NoiseSampler

START = 1704067200  # 2024-01-01T00:00:00Z
SPEC = """
[sources.people]
topic = "people"
kind = "person"
epsilon_cap = 1

[streams.flags]
source = "people"
epsilon = 1
sensitivity = 1
horizon = 2
mechanism = "kary_gls"
branching = 2
period = { unit = "fixed", start = "2024-01-01T00:00:00Z", length = 3600 }
counters = { kind = "flag", field = "hiv_positive", name = "positives" }
"""
STREAM = "flags"
PRIME = "D'"  # the neighbour D plus one record


def _event(event_id: str, hour: float) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "event_time": START + 3600 * hour,
        "attributes": {"hiv_positive": True},
    }


D = [_event("a", 0.3)]
D_PRIME = [*D, _event("x", 0.6)]
EXACT_TOTALS = {"D": (1, 1), PRIME: (2, 2)}  # running totals at t = 1, 2


def _keys(first: npt.NDArray[np.float64], second: npt.NDArray[np.float64]) -> npt.NDArray[Any]:
    """Each pair of released floats as one 16-byte key (``-0.0`` made ``0.0``: equal floats,
    equal keys)."""
    pairs = np.ascontiguousarray(np.stack([first + 0.0, second + 0.0], axis=1))
    return pairs.view(np.dtype((np.void, 16))).ravel()


@dataclass
class Attacker:
    """Every candidate node noise (each node within ``window`` of its scale), the released
    pairs each would give under each hypothesis and pipeline, sorted for look-ups."""

    strategy: KaryStrategy
    node_var: npt.NDArray[np.float64]
    limits: npt.NDArray[np.int64]  # per node, the largest |noise| searched
    candidates: int
    released: dict[tuple[str, str], npt.NDArray[Any]]  # (pipeline, hypothesis) -> sorted keys

    @classmethod
    def build(cls, window: float) -> Attacker:
        spec = parse_spec(SPEC)
        strategy = stream_strategy(spec.streams[STREAM])
        assert isinstance(strategy, KaryStrategy)
        noise = EpochNoise(strategy, 1.0, 1.0, 1, None)
        scales = np.asarray(noise.scales)[strategy.node_levels]
        limits = np.array([math.ceil(window * b) for b in scales], dtype=np.int64)
        ranges = [np.arange(-limit, limit + 1) for limit in limits]
        grid = np.stack([g.ravel() for g in np.meshgrid(*ranges, indexing="ij")]).astype(np.int64)
        whole, fraction = split_fixed(strategy.decode_noise_fixed(grid, noise.node_var))
        float_noise = strategy.decode_noise(grid.astype(np.float64), noise.node_var)
        released = {}
        for hypothesis, (s1, s2) in EXACT_TOTALS.items():
            today = [fixed_to_float(s + whole[t], fraction[t]) for t, s in enumerate((s1, s2))]
            before = [s + float_noise[t] for t, s in enumerate((s1, s2))]
            released["today", hypothesis] = np.sort(_keys(*today))
            released["previous", hypothesis] = np.sort(_keys(*before))
        return cls(strategy, noise.node_var, limits, grid.shape[1], released)

    def searched(self, noise: npt.NDArray[np.int64]) -> bool:
        """Whether the attacker's search covers this node noise."""
        return bool(np.all(np.abs(noise) <= self.limits))

    def survives(self, released: tuple[float, float], hypothesis: str, pipeline: str) -> bool:
        """Whether some candidate noise reproduces both released floats under ``hypothesis``."""
        keys = self.released[pipeline, hypothesis]
        key = _keys(np.array([released[0]]), np.array([released[1]]))
        at = int(np.searchsorted(keys, key[0]))
        return at < keys.shape[0] and bool(keys[at] == key[0])


def engine_run(
    records: list[dict[str, Any]], sampler: NoiseSampler
) -> tuple[tuple[float, float], npt.NDArray[np.int64]]:
    """One fresh engine: the released running totals at t = 1, 2 and the stored node noise."""
    engine = Engine(parse_spec(SPEC), sampler=sampler, batch=True)
    as_of = START + 2 * 3600.0
    engine.start_batch(as_of)
    for record in records:
        engine.ingest(json.dumps(record))
    out = [r for r in engine.advance_clock(as_of) if isinstance(r, ReleaseRecord)]
    released = {r.period: float(r.noisy_total) for r in out}
    noise = engine.streams[STREAM].counter.epoch_noise()
    assert noise is not None
    return (released[1], released[2]), noise[:, 0].copy()


def previous_release(
    attacker: Attacker, totals: tuple[int, int], noise: npt.NDArray[np.int64]
) -> tuple[float, float]:
    """What the previous pipeline published for these node noises: exact + float noise."""
    node_var = attacker.node_var
    decoded = attacker.strategy.decode_noise(noise.astype(np.float64)[:, None], node_var)[:, 0]
    return float(totals[0] + decoded[0]), float(totals[1] + decoded[1])


@dataclass
class Outcome:
    """Per pipeline: presence proved under D and under D', and the true hypothesis refuted."""

    proved: dict[str, int]
    truth_refuted: int
    trials: dict[str, int]  # runs per side whose noise the search covered

    def epsilon_lower_bound(self) -> float:
        low, _ = clopper_pearson(self.proved[PRIME], self.trials[PRIME])
        _, high = clopper_pearson(self.proved["D"], self.trials["D"])
        return math.log(low / high) if low > 0 else float("-inf")


PIPELINES = ("today", "previous")


def attack(attacker: Attacker, trials: int, sampler: NoiseSampler) -> dict[str, Outcome]:
    """``trials`` engine runs per side; both pipelines judged on the same draws. A run whose
    noise lies outside the search (about one in 10^9 at 25 scales) is not counted."""
    outcomes = {p: Outcome({"D": 0, PRIME: 0}, 0, {"D": 0, PRIME: 0}) for p in PIPELINES}
    for side, records in (("D", D), (PRIME, D_PRIME)):
        for _ in range(trials):
            released, noise = engine_run(records, sampler)
            if not attacker.searched(noise):
                continue
            for outcome in outcomes.values():
                outcome.trials[side] += 1
            for pipeline, values in (
                ("today", released),
                ("previous", previous_release(attacker, EXACT_TOTALS[side], noise)),
            ):
                alive = {h: attacker.survives(values, h, pipeline) for h in EXACT_TOTALS}
                if not alive[side]:
                    outcomes[pipeline].truth_refuted += 1
                if alive[PRIME] and not alive["D"]:
                    outcomes[pipeline].proved[side] += 1
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=3000, help="runs per side (default 3000)")
    parser.add_argument(
        "--window",
        type=float,
        default=25.0,
        help="noise searched per node, in units of its scale (default 25)",
    )
    add_write_flag(parser)
    args = parser.parse_args()
    started = time.perf_counter()
    attacker = Attacker.build(args.window)
    outcomes = attack(attacker, args.trials, production_sampler())
    seconds = time.perf_counter() - started
    lines = [
        "# Floating-point attack on k-ary GLS releases",
        "",
        (
            f"Command: `./run bench float_attack --trials {args.trials} --window {args.window}` "
            f"({args.trials:,} engine runs per side, OpenDP's secure sampler, "
            f"{seconds:.0f} s; {attacker.candidates:,} candidate noises per hypothesis). "
            "Stream: one flag, horizon 2, kary_gls k = 2, epsilon 1."
        ),
        "",
        (
            "| pipeline | presence proved, D | presence proved, D' | true hypothesis refuted "
            "| eps lower bound (95% CP) | within epsilon 1 |"
        ),
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, label in (
        ("today", "fixed-point decoding of the noisy nodes (this release)"),
        ("previous", "exact total + float64 noise (before issue 25)"),
    ):
        o = outcomes[name]
        bound = o.epsilon_lower_bound()
        ok = "yes" if bound <= 1.0 else "**NO**"
        lines.append(
            f"| {label} | {o.proved['D']} | {o.proved[PRIME]} | {o.truth_refuted} "
            f"| {bound:.2f} | {ok} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    target = output_dir(args.write) / "float_attack.md"
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
