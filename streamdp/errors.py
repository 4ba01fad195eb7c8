"""The exception types streamdp raises.

Every error a person can cause (bad arguments, bad configuration, bad input) is a
:class:`StreamdpError` whose message says what was wrong, with which value, and what to do.
Messages never contain anything derived from un-noised data.
"""

from enum import IntEnum


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
    durable checkpoint.

    The message names the partition only; ``offsets`` (e.g. ``"from offset 1 to 7"``) says
    where the gap is. Offsets count a partition's records, which is input volume: a log line
    shows them only where input volume may go (``--input-volume-metrics``)."""

    def __init__(self, message: str, offsets: str = "") -> None:
        super().__init__(message)
        self.offsets = offsets


class OutputWriteError(StreamdpError):
    """The broker refused or failed a write the worker must make (a checkpoint, a release or a
    dead letter): the batch stays unacknowledged and is read again after a restart."""


class MembershipLostError(StreamdpError):
    """The worker cannot be sure it is still a member of its consumer group (the coordinator
    did not confirm it within the lease, :mod:`streamdp.daemon.membership_lease`): it writes
    nothing more and must restart, after the session timeout, as a new member."""


class ExitStatus(IntEnum):
    """Exit statuses of a worker process (docs/operating.md, "Exit statuses"); from sysexits.h.
    Members are ints: ``os._exit(ExitStatus.CONFIG)`` and ``f"{ExitStatus.CONFIG}"`` give 78."""

    #: stopped on SIGTERM/SIGINT (gracefully, or at the stop deadline)
    STOPPED = 0
    #: an unexpected error (a bug): one line with the error, then exit; report it
    CRASH = 70  # EX_SOFTWARE
    #: a write to the broker failed (checkpoint, release, dead letter): restarting re-reads it
    WRITE_FAILED = 74  # EX_IOERR
    #: input records were skipped below the worker, its input stalled, or its group membership
    #: was not confirmed in time: restart me
    INPUT_GAP = 75  # EX_TEMPFAIL
    #: configuration and state or broker disagree (spec changed under existing state, budget
    #: cap exceeded, topic missing or wrongly partitioned): a restart fails the same way until
    #: fixed
    CONFIG = 78  # EX_CONFIG


# the names the operator guide and the supervisors' scripts use
EXIT_STOPPED = ExitStatus.STOPPED
EXIT_CRASH = ExitStatus.CRASH
EXIT_WRITE_FAILED = ExitStatus.WRITE_FAILED
EXIT_INPUT_GAP = ExitStatus.INPUT_GAP
EXIT_CONFIG = ExitStatus.CONFIG
