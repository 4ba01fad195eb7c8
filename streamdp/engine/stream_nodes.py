"""One stream's noisy nodes across its epochs: the current epoch's counter, the nodes of the
epochs before it that a revision may still read, which nodes were already handed to storage, and
nodes or epoch noise found stored after a crash (used instead of drawing again).

A past epoch's nodes are dropped (retired) once no revision can read them and they were handed
out for storage (:meth:`NoisyNodes.retire_before`; which epochs: :meth:`StreamRevisions.retire
<streamdp.engine.stream_revisions.StreamRevisions.retire>`), so a stream's memory stops
growing with its epochs.

Every mechanism runs through one :class:`~streamdp.continual.bank.CounterBank`: a Fenwick
counter (``fda``, ``binary``, ``naive``: one node drawn per period close) or a factored counter
(``kary_digits``, ``kary_gls``: every node of an epoch drawn at its first close, as the epoch's
noise). The counter's pending raw node sums are protected state, like the open periods' counts.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from streamdp.continual.bank import BankRelease, CounterBank


def add_run(runs: list[list[int]], epoch: int, n: int) -> None:
    """Append ``epoch`` with ``n`` nodes to runs ``[first epoch, nodes per epoch, epochs]``
    (extending the last run when it is the epoch before with as many nodes)."""
    if runs and runs[-1][1] == n and runs[-1][0] + runs[-1][2] == epoch:
        runs[-1][2] += 1
    else:
        runs.append([epoch, n, 1])


class NoisyNodes:
    """The counter of the current epoch and the noisy nodes of the epochs before it."""

    def __init__(
        self,
        counter: CounterBank,
        *,
        horizon: int,
        width: int,
        nodes_per_epoch: int,
        noise_ahead: bool,
        stored_by_caller: bool = True,
    ) -> None:
        self.counter = counter
        self.horizon = horizon
        self.width = width
        self._nodes_per_epoch = nodes_per_epoch
        # the epoch's noise is drawn at its first close (k-ary): stored per epoch, not per node
        self._noise_ahead = noise_ahead
        # True: a caller stores every node :meth:`take_new` hands out, so a past epoch is
        # retired only once handed out; False: nothing stores nodes (a file replay)
        self._stored_by_caller = stored_by_caller
        self.past: list[npt.NDArray[np.int64]] = []
        # node counts of the past epochs as runs [first epoch, nodes per epoch, epochs], kept
        # as epochs roll so the hot state never walks the nodes
        self._past_counts: list[list[int]] = []
        # (epoch, n): the nodes of epochs before ``epoch``, and the first ``n`` of ``epoch``,
        # were already handed out by take_new (or restored: stored already)
        self._taken = (0, 0)
        # (epoch, node) -> noisy value stored before a crash lost the step that drew it
        self._stored_nodes: dict[tuple[int, int], list[int]] = {}
        # epoch -> node noise stored before a crash lost the state that refers to it
        self._stored_noise: dict[int, npt.NDArray[np.int64]] = {}

    def close_period(self, epoch: int, period: int, counts: npt.NDArray[np.int64]) -> BankRelease:
        """Close period ``period`` (1-based) of ``epoch`` with true ``counts``, rolling to the
        next epoch first when the current one is complete; a node stored before a crash is used
        instead of drawing. If the counter raises, nothing here has changed."""
        counter = self.counter
        rolled = counter.periods_closed == self.horizon
        if rolled:
            counter = counter.next_epoch()
            stored = self._stored_noise.get(counter.epoch)
            if stored is not None:
                counter.adopt_noise(stored)
        release = counter.close_period(counts, stored=self._stored_nodes.pop((epoch, period), None))
        self._stored_noise.pop(counter.epoch, None)  # in use now (kept if the close failed)
        if rolled:
            self.past.append(self.counter.noisy_nodes()[1])
            add_run(self._past_counts, self.counter.epoch, self.counter.node_count)
        self.counter = counter
        return release

    def adopt_stored_nodes(self, nodes: Mapping[tuple[int, int], list[int]], closed: int) -> None:
        """Noisy nodes ``(epoch, node) -> values`` found stored beyond this state (a crash
        after they were written, before the state that refers to them): closing their periods
        uses them instead of drawing again. Nodes of periods already closed (``closed``
        absolute periods) are ignored, and so are a k-ary stream's (they follow from its stored
        epoch noise: see :meth:`adopt_stored_noise`)."""
        if self._noise_ahead:
            return
        for (epoch, node), values in nodes.items():
            if epoch * self.horizon + node > closed:
                self._stored_nodes[(epoch, node)] = list(values)

    def adopt_stored_noise(self, epoch: int, node_noise: npt.ArrayLike) -> bool:
        """Node noise of ``epoch`` found stored beyond this state (a crash after it was
        written, before the state that refers to it): the epoch uses it instead of drawing.
        Returns False, ignoring it, unless it is a whole epoch's noise (``(nodes, width)``
        integers) for an epoch whose noise this state does not hold yet."""
        noise = np.asarray(node_noise)
        counter = self.counter
        shape = (self._nodes_per_epoch, self.width)
        if not self._noise_ahead or noise.shape != shape or noise.dtype.kind not in "iu":
            return False
        if epoch > counter.epoch:
            self._stored_noise[epoch] = noise.astype(np.int64)
            return True
        if epoch == counter.epoch and counter.epoch_noise() is None:
            counter.adopt_noise(noise)
            return True
        return False

    def epoch_noise(self) -> tuple[int, npt.NDArray[np.int64]] | None:
        """``(epoch, node noise)`` of the current epoch once drawn, for the daemon to store
        once (before anything released with it is published); None when not drawn yet or the
        mechanism draws each node at its period's close."""
        noise = self.counter.epoch_noise()
        return None if noise is None else (self.counter.epoch, noise)

    def values(self) -> list[npt.NDArray[np.int64]]:
        """Stored noisy nodes of every epoch so far, each shape (n_e, width)."""
        current = self.counter.noisy_nodes()[1]
        return [*self.past, current]

    def take_new(self) -> list[tuple[int, int, list[int]]]:
        """The noisy nodes drawn since the last call (or the last :meth:`restore`), as
        ``(epoch, t, values)`` with ``t`` the node's 1-based position in its epoch, and marks
        them taken. O(nodes returned)."""
        epoch, first = self._taken
        current = self.counter.epoch
        out: list[tuple[int, int, list[int]]] = []
        oldest = current - len(self.past)
        for e in range(max(epoch, oldest), current):
            nodes = self.past[e - oldest]
            start = first if e == epoch else 0
            out += [(e, t, nodes[t - 1].tolist()) for t in range(start + 1, len(nodes) + 1)]
        start = first if epoch == current else 0
        out += [
            (current, t, values.tolist())
            for t, values in enumerate(self.counter.nodes_from(start), start=start + 1)
        ]
        self._taken = (current, self.counter.node_count)
        return out

    @property
    def oldest_epoch(self) -> int:
        """The first epoch whose nodes are held (the epochs before it were retired)."""
        return self.counter.epoch - len(self.past)

    def retirable_through(self, epoch: int) -> int:
        """The latest epoch at most ``epoch`` (and at most the current one) such that every
        held epoch before it may be dropped: with a caller that stores nodes, each was handed
        out by :meth:`take_new` (its nodes are stored before anything it released is
        published; dropping one before would lose a node that releases used)."""
        through = self.oldest_epoch
        limit = min(epoch, self.counter.epoch)
        taken_epoch, taken_nodes = self._taken
        while through < limit:
            held = self.past[through - self.oldest_epoch]
            handed_out = through < taken_epoch or (
                through == taken_epoch and taken_nodes >= held.shape[0]
            )
            if self._stored_by_caller and not handed_out:
                break
            through += 1
        return through

    def retire_before(self, epoch: int) -> list[tuple[int, int]]:
        """Drop the nodes of the held past epochs before ``epoch`` (at most
        :meth:`retirable_through`); returns ``(epoch, nodes)`` of each dropped."""
        oldest = self.oldest_epoch
        dropped = [
            (e, int(self.past[e - oldest].shape[0]))
            for e in range(oldest, self.retirable_through(epoch))
        ]
        if dropped:
            del self.past[: len(dropped)]
            first = self.oldest_epoch
            runs = self._past_counts
            while runs and runs[0][0] + runs[0][2] <= first:
                runs.pop(0)
            if runs and runs[0][0] < first:
                runs[0] = [first, runs[0][1], runs[0][0] + runs[0][2] - first]
        return dropped

    def counts(self) -> list[list[int]]:
        """Nodes per epoch as runs ``[first epoch, nodes per epoch, epochs]`` (consecutive
        epochs with as many nodes form one run), the current epoch last in a run of its own.
        O(runs): a stream that rolls regularly keeps a constant-size entry."""
        return [
            *(list(run) for run in self._past_counts),
            [self.counter.epoch, self.counter.node_count, 1],
        ]

    def restore(self, counter: CounterBank, past: list[npt.NDArray[np.int64]]) -> None:
        """Take a restored counter and past epochs' nodes (all stored already); the counter
        uses epoch noise adopted before the restore when it holds none of its own."""
        if counter.epoch_noise() is None and counter.epoch in self._stored_noise:
            counter.adopt_noise(self._stored_noise.pop(counter.epoch))
        self.counter = counter
        self.past = past
        self._past_counts = []
        oldest = counter.epoch - len(past)
        for offset, nodes in enumerate(past):
            add_run(self._past_counts, oldest + offset, int(nodes.shape[0]))
        self._taken = (counter.epoch, counter.node_count)  # restored nodes are stored already
