"""Continual counting: Fenwick trees with optimised node weights (seed 001) and the counter."""

from streamdp.continual.counter import ContinualCounter
from streamdp.continual.fda import Objective
from streamdp.continual.releases import PeriodRelease
from streamdp.continual.strategy import Mechanism, Strategy, build_strategy

__all__ = [
    "ContinualCounter",
    "Mechanism",
    "Objective",
    "PeriodRelease",
    "Strategy",
    "build_strategy",
]
