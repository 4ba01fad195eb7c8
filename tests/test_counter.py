"""ContinualCounter: exact sums without noise, one draw per finalised node at the right scale,
O(log N) raw state, restore-without-redraw, epochs, and errors."""

from __future__ import annotations

import json

import numpy as np
import numpy.typing as npt
import pytest

from streamdp.continual import ContinualCounter, build_strategy
from streamdp.continual.fenwick import interval
from streamdp.continual.strategy import MECHANISMS
from streamdp.errors import ConfigError, HorizonError, StateError
from streamdp.noise import InsecureSeededSampler


class ZeroSampler:
    """No noise at all: lets a test see the exact sums the counter computes."""

    name = "zero-test"
    secure = False

    def __init__(self) -> None:
        self.calls: list[tuple[float, int]] = []

    def discrete_laplace(
        self, scale: float, size: int, *, label: str = ""
    ) -> npt.NDArray[np.int64]:
        self.calls.append((scale, size))
        return np.zeros(size, dtype=np.int64)


class RecordingSampler:
    """Wraps a seeded sampler and records every draw."""

    name = "recording-insecure"
    secure = False

    def __init__(self, seed: int) -> None:
        self.inner = InsecureSeededSampler(seed)
        self.calls: list[tuple[float, int]] = []

    def discrete_laplace(
        self, scale: float, size: int, *, label: str = ""
    ) -> npt.NDArray[np.int64]:
        self.calls.append((scale, size))
        return self.inner.discrete_laplace(scale, size, label=label)


HORIZONS = [1, 2, 3, 7, 12, 16, 31]


def _counts(horizon: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 50, size=(horizon, width))


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("horizon", HORIZONS)
def test_without_noise_the_counter_computes_exact_sums(mechanism: str, horizon: int) -> None:
    width = 3
    a = _counts(horizon, width)
    counter = ContinualCounter(
        build_strategy(mechanism, "total", horizon), 1.0, 2.0, width, ZeroSampler()
    )
    for t in range(1, horizon + 1):
        release = counter.close_period(a[t - 1])
        assert release.period == t
        np.testing.assert_array_equal(release.noisy_total, a[:t].sum(axis=0))
        np.testing.assert_array_equal(release.noisy_count, a[t - 1])
    nodes, values, _ = counter.noisy_nodes()
    for i, value in zip(nodes, values, strict=True):
        first, last = interval(int(i)) if mechanism != "naive" else (int(i), int(i))
        np.testing.assert_array_equal(value, a[first - 1 : last].sum(axis=0))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_one_draw_per_period_at_the_node_scale(mechanism: str) -> None:
    horizon, width, eps, delta = 13, 5, 0.5, 3.0
    strategy = build_strategy(mechanism, "total", horizon)
    sampler = RecordingSampler(1)
    counter = ContinualCounter(strategy, eps, delta, width, sampler)
    max_pending = 0
    for t in range(1, horizon + 1):
        counter.close_period(np.ones(width, dtype=np.int64))
        assert len(sampler.calls) == t
        scale, size = sampler.calls[-1]
        assert size == width
        assert scale == pytest.approx(delta / (eps * strategy.weights[t - 1]), rel=1e-15)
        max_pending = max(max_pending, len(counter.pending_nodes))
    assert max_pending <= horizon.bit_length()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_releases_are_read_path_sums_of_the_stored_noisy_nodes(mechanism: str) -> None:
    horizon, width = 21, 4
    strategy = build_strategy(mechanism, "minimax", horizon)
    counter = ContinualCounter(strategy, 1.0, 1.0, width, InsecureSeededSampler(3))
    a = _counts(horizon, width, 1)
    previous = np.zeros(width, dtype=np.int64)
    for t in range(1, horizon + 1):
        release = counter.close_period(a[t - 1])
        _, values, _ = counter.noisy_nodes()
        total = sum(values[i - 1] for i in strategy.read_path(t))
        np.testing.assert_array_equal(release.noisy_total, total)
        np.testing.assert_array_equal(release.noisy_count, total - previous)
        previous = total


def test_pending_raw_sums_stay_logarithmic_for_a_long_horizon() -> None:
    horizon = 1000
    counter = ContinualCounter(build_strategy("fda", "total", horizon), 1, 1, 2, ZeroSampler())
    worst = 0
    for _ in range(horizon):
        counter.close_period(np.ones(2, dtype=np.int64))
        worst = max(worst, len(counter.pending_nodes))
    assert worst <= horizon.bit_length()
    assert counter.pending_nodes == []  # every parent of the last nodes lies past the horizon


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_restore_continues_identically_and_draws_nothing(mechanism: str) -> None:
    horizon, width = 19, 3
    strategy = build_strategy(mechanism, "total", horizon)
    a = _counts(horizon, width, 2)
    reference = ContinualCounter(strategy, 0.8, 2.0, width, RecordingSampler(11))
    expected = [reference.close_period(a[t]) for t in range(horizon)]
    for cut in range(horizon + 1):
        sampler = RecordingSampler(11)
        first = ContinualCounter(strategy, 0.8, 2.0, width, sampler)
        got = [first.close_period(a[t]) for t in range(cut)]
        state = json.loads(json.dumps(first.state()))
        draws_before = len(sampler.calls)
        restored = ContinualCounter.from_state(state, sampler)  # same generator continues
        assert len(sampler.calls) == draws_before  # restoring draws no noise
        assert restored.periods_closed == cut
        for old, new in zip(first.noisy_nodes(), restored.noisy_nodes(), strict=True):
            np.testing.assert_array_equal(old, new)
        got += [restored.close_period(a[t]) for t in range(cut, horizon)]
        assert len(sampler.calls) == horizon  # one draw per node over the whole run
        for want, have in zip(expected, got, strict=True):
            np.testing.assert_array_equal(want.noisy_total, have.noisy_total)
            np.testing.assert_array_equal(want.noisy_count, have.noisy_count)
            assert want.total_std == have.total_std
            assert want.count_std == have.count_std


def test_horizon_is_enforced_and_epochs_carry_the_noisy_total() -> None:
    horizon, width = 6, 2
    strategy = build_strategy("fda", "total", horizon)
    sampler = InsecureSeededSampler(5)
    counter = ContinualCounter(strategy, 1.0, 1.0, width, sampler)
    for _ in range(horizon):
        last = counter.close_period(np.full(width, 3, dtype=np.int64))
    with pytest.raises(HorizonError, match="next_epoch"):
        counter.close_period(np.zeros(width, dtype=np.int64))
    nxt = counter.next_epoch()
    assert nxt.epoch == 1
    assert nxt.periods_closed == 0
    release = nxt.close_period(np.full(width, 4, dtype=np.int64))
    assert release.epoch == 1
    assert release.period == 1
    _, values, variances = nxt.noisy_nodes()
    np.testing.assert_array_equal(release.noisy_total, last.noisy_total + values[0])
    np.testing.assert_array_equal(release.noisy_count, values[0])
    assert release.total_std**2 == pytest.approx(last.total_std**2 + variances[0], rel=1e-12)
    assert release.count_std**2 == pytest.approx(variances[0], rel=1e-12)
    # carry survives persistence
    restored = ContinualCounter.from_state(json.loads(json.dumps(nxt.state())), sampler)
    np.testing.assert_array_equal(restored.carry, nxt.carry)
    assert restored.carry_variance == nxt.carry_variance


def test_bad_counts_are_refused_without_changing_state() -> None:
    counter = ContinualCounter(build_strategy("fda", "total", 4), 1, 1, 3, ZeroSampler())
    with pytest.raises(ConfigError, match="shape"):
        counter.close_period(np.zeros(2, dtype=np.int64))
    with pytest.raises(ConfigError, match="integers"):
        counter.close_period(np.zeros(3, dtype=np.float64))
    assert counter.periods_closed == 0


class FailingSampler:
    name = "failing"
    secure = False

    def discrete_laplace(
        self, scale: float, size: int, *, label: str = ""
    ) -> npt.NDArray[np.int64]:
        raise RuntimeError("entropy source unavailable")


def test_a_failing_sampler_leaves_the_counter_unchanged() -> None:
    strategy = build_strategy("fda", "total", 8)
    counter = ContinualCounter(strategy, 1, 1, 2, ZeroSampler())
    counter.close_period(np.ones(2, dtype=np.int64))
    before = counter.state()
    counter.sampler = FailingSampler()
    with pytest.raises(RuntimeError):
        counter.close_period(np.ones(2, dtype=np.int64))
    after = counter.state()
    after.pop("sampler")
    before.pop("sampler")
    assert after == before


@pytest.mark.parametrize(
    "tamper",
    [
        lambda s: s.update(version=99),
        lambda s: s.update(pending=[]),
        lambda s: s.update(noisy_nodes=s["noisy_nodes"][:-1]),
        lambda s: s.update(periods_closed=100),
        lambda s: s.update(width=5),
        lambda s: s.update(mechanism="bogus"),
        lambda s: s["sampler"].update(secure=True),
        lambda s: s.pop("carry"),
    ],
)
def test_tampered_state_is_refused(tamper) -> None:
    counter = ContinualCounter(build_strategy("fda", "total", 10), 1, 1, 2, ZeroSampler())
    for _ in range(5):
        counter.close_period(np.ones(2, dtype=np.int64))
    state = json.loads(json.dumps(counter.state()))
    tamper(state)
    with pytest.raises(StateError):
        ContinualCounter.from_state(state, ZeroSampler())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"sensitivity": -1.0}, "sensitivity"),
        ({"width": 0}, "width"),
    ],
)
def test_bad_configuration_is_refused(kwargs: dict[str, float], match: str) -> None:
    args: dict[str, float] = {"epsilon": 1.0, "sensitivity": 1.0, "width": 2}
    args.update(kwargs)
    with pytest.raises(ConfigError, match=match):
        ContinualCounter(
            build_strategy("fda", "total", 4),
            args["epsilon"],
            args["sensitivity"],
            int(args["width"]),
            ZeroSampler(),
        )


def test_labelled_counter_restored_with_a_fresh_seeded_sampler_matches_uninterrupted_run() -> None:
    """A worker that crashes loses its sampler's position; with labelled draws the restarted
    counter (fresh sampler, same seed) still releases exactly what an uninterrupted one does."""
    strategy = build_strategy("fda", "total", 20)
    counts = np.arange(1, 41, dtype=np.int64).reshape(20, 2) % 7
    whole = ContinualCounter(strategy, 1.0, 1.0, 2, InsecureSeededSampler(5), noise_label="s")
    expected = [whole.close_period(c) for c in counts]
    for cut in (0, 1, 7, 19):
        first = ContinualCounter(strategy, 1.0, 1.0, 2, InsecureSeededSampler(5), noise_label="s")
        got = [first.close_period(c) for c in counts[:cut]]
        state = json.loads(json.dumps(first.state()))
        resumed = ContinualCounter.from_state(state, InsecureSeededSampler(5))
        got += [resumed.close_period(c) for c in counts[cut:]]
        for g, e in zip(got, expected, strict=True):
            assert np.array_equal(g.noisy_total, e.noisy_total)
            assert np.array_equal(g.noisy_count, e.noisy_count)


def test_a_stored_node_is_used_as_it_is_and_no_noise_is_drawn_for_it() -> None:
    """After a crash that kept a node but lost the state referring to it, the period is closed
    again with the stored node: the sampler is not called for it (no noise drawn twice)."""

    class Counting(InsecureSeededSampler):
        def __init__(self, seed: int) -> None:
            super().__init__(seed)
            self.calls = 0

        def discrete_laplace(self, scale: float, size: int, *, label: str = "") -> np.ndarray:
            self.calls += 1
            return super().discrete_laplace(scale, size, label=label)

    strategy = build_strategy("fda", "total", 8)
    sampler = Counting(1)
    first = ContinualCounter(strategy, 1.0, 1.0, 2, sampler, noise_label="s")
    first.close_period(np.array([3, 4]))
    stored = first.noisy_nodes()[1][0]
    again = ContinualCounter(strategy, 1.0, 1.0, 2, sampler, noise_label="s")
    release = again.close_period(np.array([3, 4]), stored=stored)
    assert sampler.calls == 1
    assert release.noisy_total.tolist() == stored.tolist()
    again.close_period(np.array([1, 1]))  # the next node is drawn as usual
    assert sampler.calls == 2
