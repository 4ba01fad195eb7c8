"""The feed's published view: parsed public records in, page data and CSV out (pure).

The view keeps, per stream, counter, epoch and period, the first release read (a re-publication
after a restart carries the same values; one that differs is not the worker's and is counted as
ignored, as docs/consuming.md advises every consumer), and per stream, epoch and period the
consistent record of the highest revision seen (a compacted topic keeps the same). Records are
parsed by :mod:`streamdp.feed.records`, which drops anything that is not a well-formed public
record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from streamdp.error_band import half_widths95
from streamdp.feed.places_view import (
    PlaceTree,
    counter_series,
    place_series,
    place_tree,
    places_document,
)
from streamdp.feed.privacy_loss import StreamLoss, source_losses, stream_loss
from streamdp.feed.record_fields import unreadable
from streamdp.feed.records import (
    Consistent,
    Release,
    parse_consistent,
    parse_release,
)
from streamdp.feed.tables import CONSISTENT_COLUMNS, RELEASE_COLUMNS, to_csv

V = TypeVar("V")

#: Why a release whose key was already read, with other values, is ignored.
CONFLICTING_REPUBLICATION = "a release of a key already read, with other values (the first kept)"

#: the CSV downloads' columns and writer live in :mod:`streamdp.feed.tables`
__all__ = ["CONSISTENT_COLUMNS", "RELEASE_COLUMNS", "FeedView", "StreamIndex", "to_csv"]


@dataclass
class StreamIndex:
    """One stream's releases by counter and period, its released periods in order, its
    latest consistent revision per period, its counters in declared order and, for a places
    stream, its tree."""

    by_counter: dict[str, dict[tuple[int, int], Release]] = field(default_factory=dict)
    revisions: dict[tuple[int, int], Consistent] = field(default_factory=dict)
    periods: list[tuple[int, int, str, str]] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    latest: Release | None = None
    tree: PlaceTree | None = None
    _periods: set[tuple[int, int, str, str]] = field(default_factory=set)

    def add_period(self, release: Release) -> None:
        self._periods.add((release.epoch, release.period, release.period_start, release.period_end))
        if self.latest is None or (release.epoch, release.period) > (
            self.latest.epoch,
            self.latest.period,
        ):
            self.latest = release

    def finish(self) -> None:
        self.periods = sorted(self._periods)
        self.order = declared_order([_newest(by_period) for by_period in self.by_counter.values()])
        # each counter's newest release says where it sits (a places stream)
        self.tree = place_tree({name: _newest(self.by_counter[name]) for name in self.order})


def _newest(by_period: dict[tuple[int, int], Release]) -> Release:
    return by_period[max(by_period)]


def declared_order(releases: list[Release]) -> list[str]:
    """The counters of one stream's ``releases`` in the order the spec declares them (each
    release's ``counter_index``); counters of records without it follow, by name."""
    position: dict[str, int] = {}
    for release in releases:
        if release.counter_index is not None:
            position.setdefault(release.counter, release.counter_index)
    names = {release.counter for release in releases}
    return sorted(names, key=lambda n: (n not in position, position.get(n, 0), n))


@dataclass
class FeedView:
    """Everything the page shows, built from the public records read so far."""

    releases: dict[tuple[str, str, int, int], Release] = field(default_factory=dict)
    consistent: dict[tuple[str, int, int], Consistent] = field(default_factory=dict)
    #: records read that were not well-formed release/consistent records (not shown), by
    #: reason (:func:`streamdp.feed.records.unreadable`); for the operator's console only
    ignored_by_reason: dict[str, int] = field(default_factory=dict)
    #: bumped on every change, so a poller can tell whether anything is new
    version: int = 0
    #: (version, per stream index) of :meth:`_indexed`
    _index: tuple[int, dict[str, StreamIndex]] | None = field(
        default=None, repr=False, compare=False
    )

    def clear(self) -> None:
        """Forget every record read (its source was replaced); the version still moves on, so
        a page polling it redraws."""
        self.releases.clear()
        self.consistent.clear()
        self.ignored_by_reason.clear()
        self.version += 1

    @property
    def ignored(self) -> int:
        """How many records read were not shown."""
        return sum(self.ignored_by_reason.values())

    def _ignore(self, record: object, kind: str) -> None:
        reason = unreadable(record, kind) or "missing or mistyped field"
        self.ignored_by_reason[reason] = self.ignored_by_reason.get(reason, 0) + 1

    def add(self, record: object, expected_kind: str) -> None:
        """Take one decoded record read from the ``expected_kind`` source ("release" or
        "consistent"); anything else is counted in :attr:`ignored` and dropped."""
        if expected_kind == "release":
            release = parse_release(record)
            if release is None:
                self._ignore(record, expected_kind)
                return
            key = (release.stream, release.counter, release.epoch, release.period)
            first = self.releases.get(key)
            if first is None:
                self.releases[key] = release
                self.version += 1
            elif first != release:  # the worker re-publishes the same values: not its record
                reason = CONFLICTING_REPUBLICATION
                self.ignored_by_reason[reason] = self.ignored_by_reason.get(reason, 0) + 1
            return
        revision = parse_consistent(record)
        if revision is None:
            self._ignore(record, expected_kind)
            return
        ckey = (revision.stream, revision.epoch, revision.period)
        held = self.consistent.get(ckey)
        if held is None or revision.revision > held.revision:
            self.consistent[ckey] = revision
            self.version += 1
        elif revision.revision == held.revision and revision.counts.keys() - held.counts.keys():
            # another part of a wide stream's period (records keyed ...|period|part)
            self.consistent[ckey] = held.merged(revision)
            self.version += 1

    def streams(self) -> list[str]:
        names = {key[0] for key in self.releases} | {key[0] for key in self.consistent}
        return sorted(names)

    def release_rows(self) -> list[dict[str, Any]]:
        """Every release shown, ordered by stream, counter, epoch, period."""
        return [self.releases[key].row() for key in sorted(self.releases)]

    def consistent_rows(self) -> list[dict[str, Any]]:
        """The latest consistent value of every stream, period and counter."""
        rows: list[dict[str, Any]] = []
        for key in sorted(self.consistent):
            held = self.consistent[key]
            # once per record, not per counter (a places record holds thousands)
            count_widths = half_widths95(held.count_std)
            total_widths = half_widths95(held.total_std)
            rows.extend(
                {
                    "stream": held.stream,
                    "revision": held.revision,
                    "periods_covered": held.periods_covered,
                    "constraint": held.constraint,
                    "epoch": held.epoch,
                    "period": held.period,
                    "period_start": held.period_start,
                    "period_end": held.period_end,
                    "counter": counter,
                    "consistent_count": held.counts[counter],
                    "consistent_count_std": _get(held.count_std, counter),
                    "consistent_count_half_width95": _get(count_widths, counter),
                    "consistent_total": held.totals.get(counter),
                    "consistent_total_std": _get(held.total_std, counter),
                    "consistent_total_half_width95": _get(total_widths, counter),
                    "nonnegative_count": _get(held.nonnegative_counts, counter),
                    "nonnegative_total": _get(held.nonnegative_totals, counter),
                }
                for counter in sorted(held.counts)
            )
        return rows

    def _indexed(self) -> dict[str, StreamIndex]:
        """Per stream, its releases by counter and period, its periods and its revisions
        (one pass over the view, rebuilt when the version changed)."""
        if self._index is not None and self._index[0] == self.version:
            return self._index[1]
        index: dict[str, StreamIndex] = {name: StreamIndex() for name in self.streams()}
        for key in sorted(self.releases):
            release = self.releases[key]
            held = index[release.stream]
            held.by_counter.setdefault(release.counter, {})[release.epoch, release.period] = release
            held.add_period(release)
        for (name, epoch, period), revision in sorted(self.consistent.items()):
            index[name].revisions[epoch, period] = revision
        for held in index.values():
            held.finish()
        self._index = (self.version, index)
        return index

    def series(self, stream: str, place: int) -> dict[str, Any] | None:
        """The series of the place at position ``place`` of places stream ``stream``
        (``series/<stream>/<place>.json``), or None when there is no such place."""
        held = self._indexed().get(stream)
        if held is None or held.tree is None or not 0 <= place < len(held.tree.nodes):
            return None
        return place_series(
            stream,
            held.tree,
            place,
            releases=held.by_counter,
            periods=held.periods,
            revisions=held.revisions,
        )

    def places_streams(self) -> dict[str, int]:
        """Each places stream and how many places it has (the series files it publishes)."""
        return {
            name: len(held.tree.nodes)
            for name, held in self._indexed().items()
            if held.tree is not None
        }

    def document(self, source: str) -> dict[str, Any]:
        """The JSON the page draws (``feed.json``): per stream its wording (``title``,
        ``description``, ``unit``: null when the spec declares none), mechanism, input source,
        epsilon per epoch and summed over epochs (this stream alone; per source, what one event
        or unit can lose across all its streams is ``sources``,
        :func:`streamdp.feed.privacy_loss.source_losses`), its released periods once
        (``periods``: ``[epoch, period, start, end]``), and per counter, in declared order,
        its series as columns aligned with ``periods`` (``noisy_count``, ``count_std``,
        ``noisy_total``, ``total_std``, and ``consistent_total`` from the latest revision of
        each period; null where the counter has no value; the 95% half-widths are
        ``2.12 std + 1``, :mod:`streamdp.error_band`), plus the newest consistent revision in
        full, and ``budget_groups`` (:func:`budget_groups`). Columns, not one object per
        value: a census stream of 355 counters over 120 months is a few MB, not tens.

        A places stream (its releases say where each counter sits in the tree) carries the
        root's counters only, and ``places`` (:func:`streamdp.feed.places_view.places_document`:
        the tree, every counter's latest and newest consistent values); other places' series
        are :meth:`series`."""
        out: list[dict[str, Any]] = []
        losses: list[StreamLoss] = []
        for name, held in self._indexed().items():
            every = [r for by_period in held.by_counter.values() for r in by_period.values()]
            secure = all(release.noise_secure for release in every)
            loss = stream_loss(name, every)
            losses.append(loss)
            latest = held.latest
            periods = held.periods
            keys = [(e, p) for e, p, _, _ in periods]
            revisions = held.revisions
            newest = max(revisions.values(), key=lambda c: (c.epoch, c.period), default=None)
            tree = held.tree
            shown = held.order if tree is None else tree.place_counters(0)
            counters = [
                counter_series(counter, held.by_counter[counter], keys, revisions)
                for counter in shown
            ]
            places = (
                None
                if tree is None or latest is None
                else places_document(tree, held.by_counter, (latest.epoch, latest.period), newest)
            )
            out.append(
                {
                    "stream": name,
                    # the wording of the newest release (a spec may reword a stream)
                    "title": None if latest is None else latest.title,
                    "description": None if latest is None else latest.description,
                    "unit": None if latest is None else latest.unit,
                    "mechanism": None if latest is None else latest.mechanism,
                    "objective": None if latest is None else latest.objective,
                    "horizon": None if latest is None else latest.horizon,
                    # "day", "month" or "fixed" (labels: months only for "month")
                    "period_unit": None if latest is None else latest.period_unit,
                    "sensitivity": None if latest is None else latest.sensitivity,
                    # zCDP: the L2 bound the noise is calibrated on (sensitivity is the L1 one)
                    "l2_sensitivity": None if latest is None else latest.l2_sensitivity,
                    # per what the guarantee holds, and a privacy unit's bounds
                    "protects": "event" if latest is None else latest.protects,
                    "unit_bounds": (
                        None
                        if latest is None or latest.unit_bounds is None
                        else list(latest.unit_bounds)
                    ),
                    "noise": None if latest is None else latest.noise,
                    "noise_secure": secure,
                    # its source, epsilon (zCDP: rho) per epoch and summed over its epochs
                    **loss.fields(),
                    "latest_period": None
                    if latest is None
                    else {
                        "epoch": latest.epoch,
                        "period": latest.period,
                        "period_start": latest.period_start,
                        "period_end": latest.period_end,
                    },
                    "periods": [list(p) for p in periods],
                    "counters": counters,
                    # a places stream's newest revision is in ``places`` (aligned columns)
                    "consistent_latest": None
                    if newest is None or tree is not None
                    else newest.entry(),
                    "revised_periods": len(revisions),
                    "places": places,
                    "budget_groups": budget_groups(held),
                }
            )
        return {
            "source": source,
            "version": self.version,
            # per input source: what one event (one unit) can lose across its streams
            "sources": source_losses(losses),
            "streams": out,
        }


def budget_groups(held: StreamIndex) -> list[dict[str, Any]]:
    """How a stream with budget groups (census attributes, places levels) splits its budget:
    each group's ``name``, ``share`` of the stream's epsilon (zCDP: rho) and how many
    ``counters`` spend it, in the order the groups' first counters are declared, from each
    counter's newest release. Empty for a stream without groups."""
    groups: dict[str, dict[str, Any]] = {}
    for name in held.order:
        newest = _newest(held.by_counter[name])
        if newest.budget_group is None or newest.budget_share is None:
            continue
        group = groups.setdefault(
            newest.budget_group,
            {"name": newest.budget_group, "share": newest.budget_share, "counters": 0},
        )
        group["counters"] += 1
    return list(groups.values())


def _get(values: Mapping[str, V] | None, name: str) -> V | None:
    return None if values is None else values.get(name)
