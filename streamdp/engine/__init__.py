"""The release engine: stream specs, event validation, periods, budget ledger, releases,
consistent revisions, snapshots. A plain object with no Kafka in it (DESIGN §2, §5)."""

from streamdp.engine.engine import Engine
from streamdp.engine.events import REASONS, Reason
from streamdp.engine.ledger import (
    BudgetLedger,
    JsonLinesLedgerBackend,
    LedgerBackend,
    MemoryLedgerBackend,
)
from streamdp.engine.records import ConsistentRecord, DeadLetterRecord, ReleaseRecord
from streamdp.engine.results import EngineStats, IngestResult, Rejection
from streamdp.engine.spec import EngineSpec, StreamSpec
from streamdp.engine.spec_loading import load_spec, parse_spec

__all__ = [
    "REASONS",
    "BudgetLedger",
    "ConsistentRecord",
    "DeadLetterRecord",
    "Engine",
    "EngineSpec",
    "EngineStats",
    "IngestResult",
    "JsonLinesLedgerBackend",
    "LedgerBackend",
    "MemoryLedgerBackend",
    "Reason",
    "Rejection",
    "ReleaseRecord",
    "StreamSpec",
    "load_spec",
    "parse_spec",
]
