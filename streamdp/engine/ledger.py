"""The privacy budget ledger: every epsilon (or rho) spend, recorded durably before it is used.

Accounting (DESIGN §2). A stream spends its epsilon once per epoch: the epoch's whole tree is
eps-DP for one event over its horizon. Under event-level DP the epochs of a stream hold disjoint
events, so they compose in parallel: a stream's spend on its source is the largest epsilon of its
epochs. Streams reading the same source compose sequentially: their spends add. The per-source
*event-level* spend is therefore ``sum over streams of max over epochs``; it may never exceed
the source's cap. :meth:`BudgetLedger.sequential_spent` reports the sum over epochs: the loss
of one event in every epoch, and, for streams with a privacy unit (whose sensitivity covers
a unit's records in an epoch), of one unit over the epochs it appears in. It is not a person's
loss on an event-level stream: a person with k events in one epoch moves it k times as far.

The ledger is a plain object with a pluggable backend. ``replay`` uses
:class:`JsonLinesLedgerBackend` (append + fsync): ``record_epoch`` returns only after the entry
is on disk, and the engine calls it before drawing any noise or publishing anything of that
epoch. The daemon uses :class:`MemoryLedgerBackend` and makes the ledger durable with the rest
of the source's state: the ledger is part of the engine snapshot, and the daemon stores that
snapshot (its changelog-backed table) before it publishes any output of the batch, so a spend
is durable before anything that used it is public (docs/architecture.md, the commit protocol).
Amounts are exact decimals, and every sum of them is exact (:func:`exact_sum`: Python's default
context keeps 28 digits and rounds to nearest, so a sum of two 31-digit rhos could land on the
cap; an audit found one 2e-31 over it accepted). A zCDP source (issue 27) spends rho by the
same rules: zCDP composes additively across streams like pure DP, and epochs of disjoint events
in parallel; its entries say ``"rho"`` where a pure source's say ``"epsilon"``, and an entry in
the other unit than its source's is refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal, Inexact, localcontext
from pathlib import Path
from typing import Any, Protocol

from streamdp.engine.protected_files import open_protected
from streamdp.errors import BudgetError, StateError

#: Decimal arithmetic that never rounds: a rounding would raise :class:`decimal.Inexact`.
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[Inexact])


def exact_sum(amounts: Iterable[Decimal]) -> Decimal:
    """The exact sum of budget amounts (no rounding at any number of digits)."""
    with localcontext(_EXACT):
        return sum(amounts, Decimal(0))


@dataclass(frozen=True)
class LedgerEntry:
    """One spend: ``amount`` of ``source`` by ``stream`` for its ``epoch``, in the source's
    ``unit``: ``"epsilon"`` (pure DP) or ``"rho"`` (zCDP)."""

    seq: int
    source: str
    stream: str
    epoch: int
    amount: Decimal
    unit: str = "epsilon"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the amount as exact decimal text, under its unit's name)."""
        return {
            "seq": self.seq,
            "source": self.source,
            "stream": self.stream,
            "epoch": self.epoch,
            self.unit: str(self.amount),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LedgerEntry:
        try:
            unit = "rho" if "rho" in data else "epsilon"
            return cls(
                seq=int(data["seq"]),
                source=str(data["source"]),
                stream=str(data["stream"]),
                epoch=int(data["epoch"]),
                amount=Decimal(str(data[unit])),
                unit=unit,
            )
        except (KeyError, TypeError, ValueError, ArithmeticError) as error:
            raise StateError(f"ledger entry {dict(data)!r} is malformed: {error!r}") from None


class LedgerBackend(Protocol):
    """Durable storage of ledger entries (JSON-able dicts) in append order."""

    def load(self) -> list[dict[str, Any]]:
        """Every entry stored so far."""
        ...

    def append(self, entry: dict[str, Any]) -> None:
        """Store ``entry``; it must be durable when this returns."""
        ...


class MemoryLedgerBackend:
    """In-memory backend (tests; not durable)."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def load(self) -> list[dict[str, Any]]:
        return list(self.entries)

    def append(self, entry: dict[str, Any]) -> None:
        self.entries.append(dict(entry))


class JsonLinesLedgerBackend:
    """One JSON object per line; every append is flushed and fsync'ed before returning."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def load(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        entries: list[dict[str, Any]] = []
        with self.path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    entries.append(json.loads(line))
                except json.JSONDecodeError:
                    raise StateError(
                        f"ledger {str(self.path)!r} line {number} is not JSON; the ledger is "
                        "corrupt: restore it from a backup before releasing anything"
                    ) from None
        return entries

    def append(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, sort_keys=True) + "\n"
        with open_protected(self.path, append=True) as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())


class BudgetLedger:
    """Spends per (source, stream, epoch); caps enforced per source at event level."""

    def __init__(
        self,
        caps: Mapping[str, Decimal],
        backend: LedgerBackend | None = None,
        units: Mapping[str, str] | None = None,
    ) -> None:
        self.caps = dict(caps)
        # source -> "epsilon" or "rho" (its definition's unit; epsilon unless named)
        self.units = {source: (units or {}).get(source, "epsilon") for source in self.caps}
        self.backend: LedgerBackend = backend if backend is not None else MemoryLedgerBackend()
        self._entries: list[LedgerEntry] = []
        self._index: dict[tuple[str, int], LedgerEntry] = {}
        # (source, stream, amount) -> spans [first epoch, last epoch] of consecutive epochs, in
        # the order the entries came: :meth:`state`'s runs, kept as entries are added (O(1)
        # each), so a checkpoint costs the runs, not the epochs
        self._runs: dict[tuple[str, str, Decimal], list[list[int]]] = {}
        # source -> stream -> the largest epsilon of its epochs (:meth:`spent`), kept likewise
        self._largest: dict[str, dict[str, Decimal]] = {}
        for raw in self.backend.load():
            self._add(LedgerEntry.from_dict(raw))

    def _add(self, entry: LedgerEntry) -> None:
        expected = self.units.get(entry.source)
        if expected is not None and entry.unit != expected:
            raise StateError(
                f"ledger entry of stream {entry.stream!r} epoch {entry.epoch} spends "
                f"{entry.unit} on source {entry.source!r}, whose budget is in {expected}: the "
                "losses of two privacy definitions do not add; this ledger belongs to another "
                "configuration"
            )
        key = (entry.stream, entry.epoch)
        known = self._index.get(key)
        if known is not None:
            if (known.amount, known.unit, known.source) != (entry.amount, entry.unit, entry.source):
                raise StateError(
                    f"ledger has two different spends for stream {entry.stream!r} epoch "
                    f"{entry.epoch}: {known.unit} {known.amount} and {entry.unit} {entry.amount}"
                )
            return
        self._entries.append(entry)
        self._index[key] = entry
        spans = self._runs.setdefault((entry.source, entry.stream, entry.amount), [])
        if spans and spans[-1][1] == entry.epoch - 1:
            spans[-1][1] = entry.epoch
        else:
            spans.append([entry.epoch, entry.epoch])
        per_stream = self._largest.setdefault(entry.source, {})
        per_stream[entry.stream] = max(per_stream.get(entry.stream, Decimal(0)), entry.amount)

    @property
    def entries(self) -> tuple[LedgerEntry, ...]:
        return tuple(self._entries)

    def has(self, stream: str, epoch: int) -> bool:
        return (stream, epoch) in self._index

    def spent(self, source: str) -> Decimal:
        """Event-level amount (epsilon, or rho for a zCDP source) spent on ``source``: sum over
        streams of max over epochs. O(streams): the maxima are kept as entries are added."""
        return exact_sum(self._largest.get(source, {}).values())

    def stream_spent(self, source: str) -> dict[str, Decimal]:
        """Per stream of ``source``: the largest amount of any of its epochs (what the stream
        spends per event; :meth:`spent` sums these). O(streams), kept as entries are added."""
        return dict(self._largest.get(source, {}))

    def sequential_spent(self, source: str) -> Decimal:
        """Sum of every epoch's amount on ``source``: the loss of one event in every epoch, or
        of one privacy unit over the epochs (see the module docstring)."""
        return exact_sum(e.amount for e in self._entries if e.source == source)

    def record_epoch(self, source: str, stream: str, epoch: int, amount: Decimal) -> bool:
        """Durably record that ``stream`` spends ``amount`` (epsilon, or rho for a zCDP
        source) of ``source`` in ``epoch``.

        Idempotent: returns False when already recorded (same amount). Raises
        :class:`BudgetError` when the source's cap would be exceeded; nothing is written then.
        """
        unit = self.units.get(source, "epsilon")
        known = self._index.get((stream, epoch))
        if known is not None:
            if known.amount != amount or known.unit != unit:
                raise BudgetError(
                    f"stream {stream!r} epoch {epoch} was recorded with {known.unit} "
                    f"{known.amount}, now asked for {unit} {amount}; an epoch's budget cannot "
                    "change"
                )
            return False
        cap = self.caps.get(source)
        if cap is None:
            raise BudgetError(f"source {source!r} has no {unit} cap configured")
        previous = self._largest.get(source, {}).get(stream, Decimal(0))
        # copy_negate: unary minus would round to the context's 28 digits
        after = exact_sum((self.spent(source), previous.copy_negate(), max(previous, amount)))
        if after > cap:
            raise BudgetError(
                f"stream {stream!r} epoch {epoch} would bring source {source!r} to {unit} "
                f"{after}, over its cap {cap}; nothing was released"
            )
        entry = LedgerEntry(
            seq=len(self._entries) + 1,
            source=source,
            stream=stream,
            epoch=epoch,
            amount=amount,
            unit=unit,
        )
        self.backend.append(entry.to_dict())  # durable before anything depends on it
        self._add(entry)
        return True

    def state(self) -> list[dict[str, Any]]:
        """Every entry as JSON-able data, compactly: consecutive epochs of one stream with the
        same amount form one run ``{"source", "stream", "epsilon" (or "rho"), "epochs": [first,
        last]}``,
        so a stream rolling an epoch every period does not grow the state by an entry each
        time (issue 17: a horizon-1 stream's state passed the producer's 1 MB limit). Runs of
        one (source, stream, amount) are grouped, in the order of their first entry. O(runs):
        the runs are kept as entries are added, never rebuilt from the entries."""
        return [
            {
                "source": source,
                "stream": stream,
                self.units.get(source, "epsilon"): str(amount),
                "epochs": list(span),
            }
            for (source, stream, amount), spans in self._runs.items()
            for span in spans
        ]

    def merge(self, entries: list[dict[str, Any]]) -> None:
        """Add entries from a snapshot that the backend lacks (appending them durably: they
        were spent). Reads :meth:`state`'s runs and single entries alike. :class:`StateError`
        when the merged spend is over a cap (every later spend would be refused anyway; this
        says why at restore)."""
        for raw in _expand_runs(entries):
            entry = LedgerEntry.from_dict(raw)
            if self.has(entry.stream, entry.epoch):
                self._add(entry)  # checks that the amounts agree
                continue
            fresh = LedgerEntry(
                seq=len(self._entries) + 1,
                source=entry.source,
                stream=entry.stream,
                epoch=entry.epoch,
                amount=entry.amount,
                unit=entry.unit,
            )
            self.backend.append(fresh.to_dict())
            self._add(fresh)
        for source, cap in self.caps.items():
            if self.spent(source) > cap:
                raise StateError(
                    f"the restored ledger spends {self.units.get(source, 'epsilon')} "
                    f"{self.spent(source)} on source {source!r}, over its cap {cap}: the state "
                    "is not this specification's (a spec fingerprint would have refused a changed "
                    "cap); stop and investigate before anything is released"
                )


def _expand_runs(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Single entries from :meth:`BudgetLedger.state`'s runs (old single entries pass through)."""
    out: list[dict[str, Any]] = []
    for raw in entries:
        span = raw.get("epochs") if isinstance(raw, Mapping) else None
        if span is None:
            out.append(raw)
            continue
        try:
            first, last = int(span[0]), int(span[1])
        except (TypeError, ValueError, IndexError, KeyError):
            raise StateError(f"ledger run {dict(raw)!r} is malformed") from None
        if last < first or last - first > 10_000_000:
            raise StateError(f"ledger run {dict(raw)!r} has an impossible epoch span")
        base = {k: v for k, v in raw.items() if k != "epochs"}
        out.extend({**base, "seq": 0, "epoch": epoch} for epoch in range(first, last + 1))
    return out
