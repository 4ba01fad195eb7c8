"""Non-negative integer estimates on a public tree, as post-processing (issue 29; the practice
of the US Census Bureau's TopDown algorithm): from consistent values that may be negative or
fractional, integers that are non-negative and still add up the tree exactly.

Top-down, per cell (every leading index of the values is a cell of its own):

1. the root: the nearest non-negative integer to its consistent value (``rint``, ties to even,
   then at least 0);
2. every inner node, its integer ``v`` already fixed: its children get the non-negative
   integers summing exactly to ``v`` closest in L2 to their consistent values
   (:func:`closest_integer_split`): the Euclidean projection of the children's values onto
   ``{x >= 0, sum x = v}`` (:func:`simplex_projection`), then each child the floor of its
   projected value, and the ``v - sum of floors`` units left to the largest fractional parts,
   ties broken by a public key per child and row (:func:`public_tie_keys`: a hash of the
   row's period, the cell and the place; without keys, counter order).

Step 2 is exactly the closest integer vector: for a separable convex cost over integers with a
fixed sum, the greedy "cheapest next unit" is optimal, and the unit costs left after the floors
are ordered by the fractional parts of the projection (the tests compare it with an exhaustive
search). The distance is unweighted: siblings' consistent values need not have equal
variances (on an uneven tree they differ with each child's subtree), and the split does not
weigh them by it. The result is not the closest integer tree overall
(TopDown is not), it is biased (the bound at 0 lifts small counts, and the parent's fixed sum
then lowers their larger siblings), and it reads the published consistent values only:
post-processing, no privacy cost.

Cost: per level, the siblings of every parent are sorted (grouped by how many children the
parent has, so each group is one vectorised call): O(nodes x cells x log(fan-out)).

Exactness. The one float computed with rounding is ``tau``, the shift of the projection; the
floors and the order of the fractional parts of ``c - tau`` are then exact
(:func:`fraction_parts`), so siblings whose published values differ by exactly a whole number
tie, whatever their magnitudes. Ties are common: the tree projection shifts equally weighted
siblings by one amount, and floats of one binade keep the same fraction. Broken by counter
order, a parent's extra units would go to its first children in every period (each estimate
moves by at most one unit, but always the same way); the engine passes keys that rotate them
over periods, a fixed function of public values (the period, the cell, the place), so every
tied sibling gets the extra unit about equally often and replay and worker agree. Any
tie-break gives the same L2 distance: the split stays the closest. A rounding of ``tau`` can
move the
answer only where a sibling's fractional part lies within that rounding of ``tau``'s, and the
sum stays exact; where it would leave the unit count outside ``0..children`` (values near
2^60), the row is computed in exact rationals (:func:`exact_integer_split`). The tests find
the fast path equal to the exact one on every row they draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import floor

import numpy as np
import numpy.typing as npt

from streamdp.consistency.tree import Tree, tree_values

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: The label records carry beside these estimates (``nonnegative_method``).
METHOD = "top_down_rounding"


def nearest_nonnegative_integers(values: npt.ArrayLike) -> IntArray:
    """Each value's nearest integer (ties to even), 0 where that is negative."""
    rounded = np.maximum(np.rint(np.asarray(values, dtype=np.float64)), 0.0)
    out: IntArray = rounded.astype(np.int64)
    return out


def simplex_shift(values: npt.ArrayLike, totals: npt.ArrayLike) -> FloatArray:
    """Per row of ``values`` (shape (..., k)), the ``tau`` with ``sum max(c - tau, 0) = total``
    (``totals`` shape (...), each >= 0): sort-based, O(k log k) per row."""
    c = np.asarray(values, dtype=np.float64)
    v = np.asarray(totals, dtype=np.float64)[..., None]
    k = c.shape[-1]
    ordered = -np.sort(-c, axis=-1)
    excess = np.cumsum(ordered, axis=-1) - v
    ranks = np.arange(1, k + 1, dtype=np.float64)
    keep = ordered - excess / ranks > 0
    # the condition holds on a prefix of the sorted values: its length is the support's size
    # (none holds only when the total is 0: then every value goes to 0, as with a support of 1)
    last = np.where(keep.any(axis=-1), k - 1 - np.argmax(keep[..., ::-1], axis=-1), 0)
    tau: FloatArray = np.take_along_axis(excess, last[..., None], axis=-1)[..., 0] / (last + 1)
    return tau


def simplex_projection(values: npt.ArrayLike, totals: npt.ArrayLike) -> FloatArray:
    """The Euclidean projection of every row of ``values`` (shape (..., k)) onto
    ``{x >= 0, sum x = total}``: ``max(c - tau, 0)`` (:func:`simplex_shift`)."""
    c = np.asarray(values, dtype=np.float64)
    out: FloatArray = np.maximum(c - simplex_shift(c, totals)[..., None], 0.0)
    return out


def closest_integer_split(
    values: npt.ArrayLike, totals: npt.ArrayLike, tie_keys: npt.ArrayLike | None = None
) -> IntArray:
    """Per row of ``values`` (shape (..., k)): the non-negative integers summing exactly to the
    row's total (``totals``, integers >= 0, shape (...)) closest in L2 to the row; among equal
    fractional parts the smaller ``tie_keys`` (shape of ``values``) wins, then the lower index
    (see the module).

    The projected value ``c - tau`` is never formed in floats: its floor and the order of its
    fractional parts follow exactly from the floors and fractional parts of ``c`` and ``tau``
    (:func:`fraction_parts`, exact), so equal fractional parts are ties whatever the
    magnitudes.
    """
    c = np.asarray(values, dtype=np.float64)
    v = np.asarray(totals, dtype=np.int64)
    if np.any(v < 0):
        raise ValueError("totals must be non-negative integers")
    k = c.shape[-1]
    tau = simplex_shift(c, v)[..., None]
    tau_floor, tau_high, tau_low = fraction_parts(tau)
    c_floor, c_high, c_low = fraction_parts(c)
    positive = c > tau
    # c - tau = (floor c - floor tau) + (frac c - frac tau): one unit less, and a fractional
    # part of 1 + frac c - frac tau, where frac c < frac tau ("wrapped")
    below = (c_high < tau_high) | ((c_high == tau_high) & (c_low < tau_low))
    wrapped = positive & below
    whole = np.where(positive, c_floor - tau_floor - wrapped, 0)
    units = v - whole.sum(axis=-1)
    # rank by fractional part of c - tau, largest first: the wrapped ones (largest c fraction
    # first), then the others (a value at 0 has fractional part 0, like c fraction = tau's);
    # equal fractions by tie key, then (the sort is stable) counter order
    high = np.where(positive, c_high, tau_high)
    low = np.where(positive, c_low, tau_low)
    keys = np.zeros(c.shape, np.uint64) if tie_keys is None else np.asarray(tie_keys, np.uint64)
    order = np.lexsort((keys, -low, -high, ~wrapped), axis=-1)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(k), order.shape), axis=-1)
    out: IntArray = whole + (rank < units[..., None])
    # the float tau is within rounding of the exact one, which moves the units by less than
    # one unless the values are near 2^60 (floats there are 256 apart): those rows exactly
    unsure = (units < 0) | (units > k)
    if np.any(unsure):
        for at in zip(*np.nonzero(unsure), strict=True):
            out[at] = exact_integer_split(c[at].tolist(), int(v[at]), keys[at].tolist())
    return out


def fraction_parts(values: FloatArray) -> tuple[IntArray, FloatArray, FloatArray]:
    """``floor(x)`` (int64) and the fractional part ``x - floor(x)`` exactly, as the float
    nearest to it plus the rest (an error-free sum): for a negative ``x`` the fractional part
    may need more bits than a float holds. Pairs compare in lexicographic order as their exact
    sums do."""
    floors = np.floor(values)
    high = values - floors
    back = high - values
    low = (values - (high - back)) + (-floors - back)
    return floors.astype(np.int64), high, low


def exact_integer_split(
    values: Sequence[float], total: int, tie_keys: Sequence[int] | None = None
) -> list[int]:
    """:func:`closest_integer_split` of one row in exact rationals (slow; for values whose
    float arithmetic cannot be trusted to the unit)."""
    keys = [0] * len(values) if tie_keys is None else list(tie_keys)
    c = [Fraction(x) for x in values]
    ordered = sorted(c, reverse=True)
    running = Fraction(0)
    tau = ordered[0] - total
    for j, value in enumerate(ordered, start=1):
        running += value
        if value - (running - total) / j > 0:
            tau = (running - total) / j
    projected = [max(x - tau, Fraction(0)) for x in c]
    whole = [floor(p) for p in projected]
    units = total - sum(whole)
    ranked = sorted(range(len(c)), key=lambda i: (-(projected[i] - whole[i]), keys[i], i))
    for i in ranked[:units]:
        whole[i] += 1
    return whole


def public_tie_keys(salts: npt.ArrayLike, cells: int, places: int) -> npt.NDArray[np.uint64]:
    """Tie-break keys of shape (n, cells, places): a 64-bit mix (splitmix64's finaliser) of
    each row's public ``salts`` (shape (n,), e.g. the absolute period), the cell and the place.
    A fixed function of public values only, so the estimates stay post-processing and every
    run computes the same; over salts, each place of a tied group ranks first about equally
    often."""
    row = _mix64(np.asarray(salts, dtype=np.int64).astype(np.uint64))[:, None, None]
    where = np.arange(cells * places, dtype=np.uint64).reshape(1, cells, places)
    return _mix64(row ^ _mix64(where))


def _mix64(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64's output function (wrapping uint64 arithmetic), element-wise."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        out: npt.NDArray[np.uint64] = z ^ (z >> np.uint64(31))
    return out


@dataclass(frozen=True)
class SiblingGroup:
    """The parents of one level that have ``k`` children each, and those children (the
    children of ``parents[g]`` are ``children[g]``, in counter order)."""

    parents: IntArray
    children: IntArray


def sibling_groups(tree: Tree) -> list[list[SiblingGroup]]:
    """Per level below the root, its children grouped by their parent's number of children
    (one vectorised split per group)."""
    levels: list[list[SiblingGroup]] = []
    for start, stop in tree.level_bounds[:-1]:
        inner = np.arange(start, stop)[tree.child_count[start:stop] > 0]
        groups = []
        for k in np.unique(tree.child_count[inner]).tolist():
            parents = inner[tree.child_count[inner] == k]
            children = tree.first_child[parents][:, None] + np.arange(k)
            groups.append(SiblingGroup(parents.astype(np.int64), children.astype(np.int64)))
        levels.append(groups)
    return levels


class TopDownIntegers:
    """Non-negative integer, tree-consistent estimates of the values of a places stream
    (counters place-major, ``cells`` cells inner), each cell on its own (see the module).

    Built once per tree (the sibling groups); calling it is pure."""

    def __init__(self, tree: Tree, cells: int = 1) -> None:
        if cells < 1:
            raise ValueError("cells must be at least 1")
        self.tree = tree
        self.cells = cells
        self._levels = sibling_groups(tree)

    def __call__(self, values: npt.ArrayLike, salts: npt.ArrayLike | None = None) -> IntArray:
        """Rows of ``values`` (shape (n, places x cells)) -> int64 of the same shape:
        non-negative, and every place exactly the sum of its children in every cell. Ties
        between siblings are broken by :func:`public_tie_keys` of ``salts`` (one public
        integer per row, e.g. the absolute period); None: by counter order."""
        x = np.asarray(values, dtype=np.float64)
        n, places, cells = x.shape[0], self.tree.size, self.cells
        if x.ndim != 2 or x.shape[1] != places * cells:
            raise ValueError(f"values have shape {x.shape}; expected (n, {places * cells})")
        by_cell = tree_values(x.reshape(n, places, cells).transpose(0, 2, 1), self.tree)
        keys = None if salts is None else public_tie_keys(salts, cells, places)
        return self.by_cell(by_cell, keys).transpose(0, 2, 1).reshape(n, -1)

    def by_cell(
        self, values: FloatArray, tie_keys: npt.NDArray[np.uint64] | None = None
    ) -> IntArray:
        """The estimates of values of shape (..., places), every leading index a cell
        (``tie_keys``: the same shape, see :func:`closest_integer_split`)."""
        out = np.zeros(values.shape, dtype=np.int64)
        out[..., 0] = nearest_nonnegative_integers(values[..., 0])
        for groups in self._levels:
            for group in groups:
                out[..., group.children] = closest_integer_split(
                    values[..., group.children],
                    out[..., group.parents],
                    None if tie_keys is None else tie_keys[..., group.children],
                )
        return out
