"""How a fatal error ends a worker: its exit status and its one log line (docs/operating.md,
"Exit statuses"). The line says what failed and what to do, never a record's content."""

from __future__ import annotations

from aiokafka.errors import KafkaError
from faust.exceptions import ProducerSendError

from streamdp.errors import (
    EXIT_CONFIG,
    EXIT_CRASH,
    EXIT_INPUT_GAP,
    EXIT_WRITE_FAILED,
    BudgetError,
    ConfigError,
    InputGapError,
    MembershipLostError,
    OutputWriteError,
    StateError,
)


def fatal_exit(reason: BaseException, *, show_offsets: bool = False) -> tuple[int, str]:
    """The exit status (docs/operating.md, "Exit statuses") and the one log line for an error
    that ends a worker. The line says what failed and what to do; for an unexpected error it
    names the error's type and where it was raised, never its message (which could quote a
    record). An input gap's offsets (input volume) are in the line only if ``show_offsets``
    (``--input-volume-metrics``)."""
    if isinstance(reason, InputGapError):
        where = f" ({reason.offsets})" if show_offsets and reason.offsets else ""
        return EXIT_INPUT_GAP, f"{reason}{where} (exit status {EXIT_INPUT_GAP}: restart me)"
    if isinstance(reason, MembershipLostError):
        return EXIT_INPUT_GAP, (
            f"{reason} (exit status {EXIT_INPUT_GAP}: restart me after the group session timeout)"
        )
    if isinstance(reason, StateError):
        return EXIT_CONFIG, (
            f"fatal configuration problem, exit status {EXIT_CONFIG}: the stored state cannot "
            f"be used: {reason}. Run the worker with the spec the state was written under; "
            "a spec change needs a new --app-id (new state; its budget is spent again on the "
            "same people: retire the old releases first). Restarting as is fails the same way"
        )
    if isinstance(reason, BudgetError):
        return EXIT_CONFIG, (
            f"fatal configuration problem, exit status {EXIT_CONFIG}: privacy budget: {reason}. "
            "Lower the stream's epsilon or end it (on_epoch_end = 'stop'); raise the source's "
            "epsilon_cap only if the extra loss is accepted. Restarting as is fails the same way"
        )
    if isinstance(reason, ConfigError):
        return EXIT_CONFIG, (
            f"fatal configuration problem, exit status {EXIT_CONFIG}: {reason}. "
            "Restarting as is fails the same way"
        )
    if isinstance(reason, OutputWriteError | ProducerSendError | KafkaError):
        return EXIT_WRITE_FAILED, (
            f"a write to the broker failed, exit status {EXIT_WRITE_FAILED}: "
            f"{type(reason).__name__}: {_first_line(reason)}. The batch was not acknowledged "
            "and is read again after a restart; if the error names a size limit "
            "(MessageSizeTooLarge, RecordTooLarge), raise the broker's max.message.bytes and "
            "the worker's producer limit together, or a restart fails the same way"
        )
    where = "unknown place"
    tb = reason.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
    return EXIT_CRASH, (
        f"unexpected error, exit status {EXIT_CRASH}: {type(reason).__name__} raised at "
        f"{where} (message withheld: it may quote a record). This is a bug: please report it "
        "with this line; a restart resumes from the last checkpoint"
    )


def _first_line(reason: BaseException) -> str:
    text = str(reason).strip().splitlines()
    return text[0][:300] if text else "(no message)"
