"""What one worker process holds besides Faust's own objects, and its /status view."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from streamdp import __version__
from streamdp.budget_view import BudgetView, SourceBudget, StreamBudget
from streamdp.daemon.service import ReleaseService
from streamdp.daemon.settings import DaemonSettings
from streamdp.engine import EngineSpec
from streamdp.engine.stream_privacy import zcdp_epsilon_bound
from streamdp.engine.stream_releases import noise_name
from streamdp.metrics import StreamdpMetrics
from streamdp.noise import InsecureSeededSampler, production_sampler
from streamdp.noise.sampler import NoiseSampler

log = logging.getLogger("streamdp.daemon")


@dataclass
class WorkerRuntime:
    """What one worker process holds besides Faust's own objects."""

    settings: DaemonSettings
    spec: EngineSpec
    sampler: NoiseSampler
    metrics: StreamdpMetrics
    service: ReleaseService | None = None
    recovered: Any = None  # () -> bool: Faust finished restoring the state table
    # () -> list[str]: each input partition as the stall watchdog sees it (diagnostic dump)
    describe_inputs: Any = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # the batch whose checkpoint, publications and acknowledgement are under way (batch path)
    in_flight: asyncio.Future[None] | None = None
    # set once Faust has stopped the consumer: no further batch is committed (its records stay
    # unacknowledged and the next owner reads them again)
    shutting_down: bool = False
    # the one line logged when a fatal error ends the worker (it is not ready from then on)
    fatal: str | None = None
    started_at: float = field(default_factory=time.time)
    batches: int = 0
    records: int = 0
    # streams whose backlog of due periods was reported (once each: batches.BatchDriver)
    backlog_warned: set[str] = field(default_factory=set)

    def budget_view(self) -> BudgetView:
        """The budget gauges, read from the ledgers of the sources this worker holds."""
        service = self.service
        if service is None:
            return BudgetView()
        streams: list[StreamBudget] = []
        sources: list[SourceBudget] = []
        for name, engine in service.engines().items():
            spent = engine.ledger.spent(name)
            source = self.spec.sources[name]
            unit = engine.ledger.units.get(name, "epsilon")
            sources.append(
                # exact decimals: the headroom gauge subtracts them (metrics.SourceBudget)
                SourceBudget(name, source.cap, spent, engine.ledger.sequential_spent(name), unit)
            )
            per_stream = engine.ledger.stream_spent(name)
            for stream, stream_spec in self.spec.streams.items():
                if stream_spec.source == name:
                    streams.append(
                        StreamBudget(
                            stream,
                            name,
                            stream_spec.budget,
                            per_stream.get(stream, Decimal(0)),
                            unit,
                            None if stream_spec.rho is None else stream_spec.epsilon,
                        )
                    )
        return BudgetView(tuple(streams), tuple(sources))

    @property
    def ready(self) -> bool:
        """The agent runs and the state table is restored from its changelog."""
        if self.fatal is not None:
            return False
        return self.service is not None and bool(self.recovered is None or self.recovered())

    def status(self) -> dict[str, Any]:
        """The JSON status view: configuration, ownership and progress; never any count."""
        service = self.service
        owned = service.engines() if service is not None else {}
        streams: dict[str, Any] = {}
        for name, stream_spec in self.spec.streams.items():
            engine = owned.get(stream_spec.source)
            entry: dict[str, Any] = {
                "source": stream_spec.source,
                "owned_here": engine is not None,
                "privacy_definition": stream_spec.definition,
                # under zCDP: the (epsilon, delta) bound of rho_per_epoch (reports only)
                "epsilon_per_epoch": str(stream_spec.epsilon),
                "horizon": stream_spec.horizon,
                "mechanism": stream_spec.mechanism,
                "objective": stream_spec.objective,
                # per what the budget holds: "event" or "<unit field> per epoch"; over the
                # stream's life a unit's losses add up over the epochs it appears in
                "protects": stream_spec.protects,
                # the L1 bound (a unit's, for a stream with a privacy unit)
                "sensitivity": stream_spec.noise_sensitivity,
                # what its releases' noise is drawn from, as their records' noise field says
                "noise": noise_name(self.sampler, stream_spec),
            }
            if stream_spec.privacy_unit is not None:
                entry["privacy_unit"] = {
                    "field": stream_spec.privacy_unit.field,
                    "max_events_per_period": stream_spec.privacy_unit.max_events_per_period,
                    "max_periods_per_epoch": stream_spec.privacy_unit.max_periods_per_epoch,
                    "event_sensitivity": stream_spec.sensitivity,
                }
            if stream_spec.rho is not None:
                entry["rho_per_epoch"] = str(stream_spec.rho)
                entry["privacy_delta"] = str(stream_spec.delta)
                # the L2 bound the Gaussian noise is calibrated on (the records' field)
                entry["l2_sensitivity"] = math.sqrt(stream_spec.l2_squared)
            if engine is not None:
                runtime = engine.streams[name]
                entry["periods_released"] = runtime.closed
                entry["epoch"] = runtime.counter.epoch
                entry["periods_released_this_epoch"] = runtime.counter.periods_closed
                entry["revision"] = runtime.revision
                unit = engine.ledger.units.get(stream_spec.source, "epsilon")
                entry[f"{unit}_spent_on_source"] = str(engine.ledger.spent(stream_spec.source))
                # summed over epochs: one event in every epoch, or one privacy unit over
                # the epochs (a person with k events in an epoch is not covered by it)
                sequential = engine.ledger.sequential_spent(stream_spec.source)
                entry[f"{unit}_sequential_spent_on_source"] = str(sequential)
                if stream_spec.rho is not None and sequential > 0:  # as (epsilon, delta) too
                    entry["epsilon_of_rho_sequential_spent_on_source"] = str(
                        zcdp_epsilon_bound(sequential, stream_spec.delta)
                    )
            streams[name] = entry
        out: dict[str, Any] = {
            "service": "streamdp",
            "version": __version__,
            "app_id": self.settings.app_id,
            "ready": self.ready,
            "noise": {
                "sampler": self.sampler.name,
                # the distributions the streams' releases are drawn from (zCDP streams: the
                # sampler's discrete Gaussian)
                "draws": sorted({e["noise"] for e in streams.values()}),
                "secure": bool(self.sampler.secure),
            },
            "sources_owned": sorted(owned),
            "uptime_seconds": round(time.time() - self.started_at, 3),
            "clock": self.settings.clock,
            "delivery_allowance_seconds": self.settings.delivery_allowance_seconds,
            "streams": streams,
        }
        if self.settings.metrics_input_volume:
            # input volume: shown only where /metrics is declared a protected surface too
            out["batches_processed"] = self.batches
        return out


def sampler_for(settings: DaemonSettings) -> NoiseSampler:
    """The production sampler, or the INSECURE seeded one for ``--insecure-seed`` (logged)."""
    if settings.insecure_seed is None:
        return production_sampler()
    log.warning(
        "INSECURE seeded noise (--insecure-seed): for tests and demos only; releases are not "
        "private"
    )
    return InsecureSeededSampler(settings.insecure_seed)
