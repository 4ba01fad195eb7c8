"""The exception types streamdp raises.

Every error a person can cause (bad arguments, bad configuration, bad input) is a
:class:`StreamdpError` whose message says what was wrong, with which value, and what to do.
Messages never contain anything derived from un-noised data.
"""


class StreamdpError(Exception):
    """Base class of every error streamdp raises on purpose."""


class ConfigError(StreamdpError):
    """A configuration (stream spec, CLI argument) is invalid."""


class BudgetError(StreamdpError):
    """A privacy budget would be exceeded, or the ledger is inconsistent."""


class HorizonError(StreamdpError):
    """A counter was asked to release past its horizon without rolling into a new epoch."""


class StateError(StreamdpError):
    """Persisted state cannot be restored (wrong version, wrong shape, tampered)."""


class BrokerError(StreamdpError):
    """The embedded Kafka-protocol broker cannot be found, started, or asked to do something."""


class InputGapError(StreamdpError):
    """Input records were skipped below the worker (an offset gap): continuing would count later
    records while the skipped ones could never be counted. The worker must restart from its last
    durable checkpoint."""
