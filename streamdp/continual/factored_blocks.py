"""Which blocks of a k-ary strategy each period close finalises, and in what order.

A block is final when its last period closes: at period ``t``, levels ``0, 1, ..`` while
``k^l`` divides ``t`` (amortised ``k/(k-1)`` blocks per period), and every level at the horizon.
The finalising order is the order a factored counter stores its noisy nodes in.
"""

from __future__ import annotations

from streamdp.continual.kary import KaryStrategy


def blocks_ending(strategy: KaryStrategy, t: int) -> list[tuple[int, int | None]]:
    """``(level, 0-based node or None)`` of every block ending at period ``t``, in
    finalising order: levels 0, 1, .. while ``k^l`` divides ``t`` (amortised ``k/(k-1)``
    blocks per period), every level at the horizon; None for a level's block past its
    last node (negative digits keep no block there)."""
    out: list[tuple[int, int | None]] = []
    last = t == strategy.horizon
    size = 1
    for level, offset in enumerate(strategy.level_offsets):
        if t % size and not last:
            break
        block = (t - 1) // size
        out.append((level, offset + block if block < strategy.blocks[level] else None))
        size *= strategy.branching
    return out


def finalised_nodes(strategy: KaryStrategy, closed: int) -> tuple[list[int], list[int]]:
    """After ``closed`` period closes: the 1-based ids of the finalised nodes in finalising
    order, and for each period ``t`` the position in that order of its level-0 block."""
    ids: list[int] = []
    rows: list[int] = []
    for t in range(1, closed + 1):
        for level, node in blocks_ending(strategy, t):
            if node is not None:
                if level == 0:
                    rows.append(len(ids))
                ids.append(node + 1)
    return ids, rows
