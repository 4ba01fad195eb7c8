"""The engine's complete state as plain JSON-able data and back (protect it like the input
topic: it holds raw counts). :class:`EnginePersistence` is a base of
:class:`~streamdp.engine.engine.Engine`, which owns the state it names; the daemon stores the
state in parts as it changes (:meth:`Engine.take_changes
<streamdp.engine.engine.Engine.take_changes>`) and joins them back to restore."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from streamdp.engine.changes import ChangeTracker
from streamdp.engine.ledger import BudgetLedger
from streamdp.engine.results import NEVER, EngineStats
from streamdp.engine.spec import EngineSpec
from streamdp.engine.stream import StreamRuntime
from streamdp.errors import StateError
from streamdp.noise.sampler import NoiseSampler

ENGINE_STATE_KIND = "streamdp.engine"
# 2: the public clock reading ("clock") replaces the event-time watermarks of version 1
ENGINE_STATE_VERSION = 2
_RESTORABLE_VERSIONS = (1, 2)


class EnginePersistence:
    """:meth:`snapshot` and :meth:`restore` (see :class:`~streamdp.engine.engine.Engine`)."""

    spec: EngineSpec
    sampler: NoiseSampler
    batch: bool
    now: float
    ledger: BudgetLedger
    stats: EngineStats
    streams: dict[str, StreamRuntime]
    _fingerprint: str
    _offsets: dict[tuple[str, int], int]
    _revisions_seen: dict[str, int]
    _drops_taken: dict[str, int]
    _changes: ChangeTracker

    def snapshot(
        self, *, with_seen: bool = True, with_noise: bool = True, with_nodes: bool = True
    ) -> dict[str, Any]:
        """The complete state as plain JSON-able data (protect it like the input topic).

        ``with_seen=False`` leaves out the open periods' content keys, ``with_noise=False`` the
        k-ary streams' epoch noise, ``with_nodes=False`` every noisy node, each stream saying
        how many it has under ``node_counts``. With all three off this is the *hot* state of
        :meth:`take_changes` (which hands out the rest as it changes): its cost does not grow
        with the periods closed (the ledger's spends are runs of epochs)."""
        return {
            "kind": ENGINE_STATE_KIND,
            "version": ENGINE_STATE_VERSION,
            "spec_fingerprint": self._fingerprint,
            "noise": {"name": self.sampler.name, "secure": bool(self.sampler.secure)},
            "clock": self.now if self.now > NEVER else None,
            "offsets": [[t, p, o] for (t, p), o in sorted(self._offsets.items())],
            "ledger": self.ledger.state(),
            "stats": self.stats.to_dict(),
            "streams": {
                name: r.state(with_seen=with_seen, with_noise=with_noise, with_nodes=with_nodes)
                for name, r in self.streams.items()
            },
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`snapshot` output into this engine (same spec); draws no noise."""
        if (
            state.get("kind") != ENGINE_STATE_KIND
            or state.get("version") not in _RESTORABLE_VERSIONS
        ):
            raise StateError(
                f"not an engine snapshot of version {ENGINE_STATE_VERSION} "
                f"(kind={state.get('kind')!r}, version={state.get('version')!r})"
            )
        # a state stored before the configuration keys were renamed (format 1) carries the
        # fingerprint of the old names: it restores under the same configuration renamed
        if state.get("spec_fingerprint") not in self.spec.fingerprints():
            raise StateError(
                "snapshot was taken under a different configuration; restore it with the "
                "configuration it was taken with"
            )
        try:
            streams = dict(state["streams"])
            for name, runtime in self.streams.items():
                if name not in streams:
                    raise StateError(f"snapshot has no state for stream {name!r}")
                runtime.restore(streams[name])
            self.ledger.merge(list(state["ledger"]))
            clock = state.get("clock")
            self.now = NEVER if clock is None else float(clock)
            self._offsets = {(str(t), int(p)): int(o) for t, p, o in state["offsets"]}
            stats = dict(state["stats"])
        except StateError:
            raise
        except (KeyError, TypeError, ValueError) as error:
            raise StateError(f"engine snapshot is malformed ({type(error).__name__})") from None
        self.stats = EngineStats(
            events_accepted=int(stats.get("events_accepted", 0)),
            events_rejected=int(stats.get("events_rejected", 0)),
            controls=int(stats.get("controls", 0)),
            skipped=int(stats.get("skipped", 0)),
            rejected_by_reason=Counter(dict(stats.get("rejected_by_reason", {}))),
            periods_released=Counter(dict(stats.get("periods_released", {}))),
            revisions=Counter(dict(stats.get("revisions", {}))),
            dropped_over_unit_bound=Counter(dict(stats.get("dropped_over_unit_bound", {}))),
        )
        self._revisions_seen = {name: r.revision for name, r in self.streams.items()}
        # the restored drops were handed out before the state was stored: not new ones
        self._drops_taken = dict(self.stats.dropped_over_unit_bound)
        self._changes.restored(self.streams)  # what was restored is stored
        if self.now > NEVER:
            for runtime in self.streams.values():
                runtime.set_arrival(self.now, batch=self.batch)
