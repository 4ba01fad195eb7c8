"""The contract of streamdp.faust_internals with the installed faust-streaming and aiokafka
(issue 15: "every faust-streaming internal behind one pinned adapter module with a contract
test per private attribute it touches").

Each private attribute the adapter reads, sets or overrides is checked here against the
installed package: a method by its parameters, an attribute by where the library defines it.
``_drain_messages`` is different: the adapter's batching drain loop is an edited copy of it, so
its upstream source is pinned by digest (a changed upstream loop must be re-read and the copy
re-derived). So is ``_commit_offsets``: ``honest_commits`` relies on its order (the record is
written right after ``_commit`` returns, with no await between). The versions are pinned in
pyproject.toml and checked here too.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import tomllib
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.client import AIOKafkaClient
from aiokafka.consumer.fetcher import PartitionRecords
from aiokafka.consumer.group_coordinator import CoordinatorGroupRebalance, GroupCoordinator
from aiokafka.protocol.group import (
    HeartbeatRequest,
    HeartbeatResponse_v1,
    LeaveGroupRequest,
    SyncGroupRequest,
    SyncGroupResponse_v1,
)
from faust.transport.consumer import Consumer, ThreadDelegateConsumer
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as FaustAIOKafkaConsumer
from mode.services import Service

import streamdp.faust_internals as adapter

ROOT = Path(__file__).resolve().parents[1]
#: sha256 of faust-streaming 0.15.3's Consumer._drain_messages source, which
#: streamdp.faust_internals.batching_consumer's _drain_messages is an edited copy of
DRAIN_MESSAGES_SHA256 = "44a2500309e83c630493f6828af50166ec8d96a0b3e4fb2bab735f704ae93417"
#: sha256 of faust-streaming 0.15.3's Consumer._commit_offsets source, whose order (the record
#: of committed offsets is written right after _commit returns) honest_commits relies on
COMMIT_OFFSETS_SHA256 = "1a6979904118844111259d182ca1c6e92ccc16364ccbe55c58e59d6e254a7adb"


def _parameters(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


def _sets(cls: type, attribute: str) -> bool:
    """Whether the class's own source assigns ``self.<attribute>`` or declares it."""
    source = inspect.getsource(cls)
    return bool(
        re.search(rf"self\.{attribute}\s*(:[^=\n]*)?=", source)
        or re.search(rf"^\s+{attribute}\s*:", source, re.M)
    )


def test_the_installed_versions_are_the_pinned_ones() -> None:
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for package in ("faust-streaming", "aiokafka"):
        pinned = re.compile(rf"{re.escape(package)}(\[[a-z0-9,]+\])?==(?P<version>\S+)")
        (pin,) = [m for p in pins if (m := pinned.fullmatch(p))]  # with any extras
        assert pin["version"] == version(package), (pin.string, version(package))


def test_the_drain_loop_copied_from_faust_is_unchanged_upstream() -> None:
    source = inspect.getsource(Consumer._drain_messages)
    digest = hashlib.sha256(source.encode()).hexdigest()
    assert digest == DRAIN_MESSAGES_SHA256, (
        "faust-streaming's Consumer._drain_messages changed: re-derive the copy in "
        "streamdp.faust_internals.batching_consumer from the new loop, then update the digest"
    )


def test_the_commit_step_honest_commits_wraps_is_unchanged_upstream() -> None:
    source = inspect.getsource(Consumer._commit_offsets)
    digest = hashlib.sha256(source.encode()).hexdigest()
    assert digest == COMMIT_OFFSETS_SHA256, (
        "faust-streaming's Consumer._commit_offsets changed: re-check what "
        "streamdp.faust_internals.honest_commits assumes of it (and whether it is still "
        "needed: tests/test_faust_commits.py), then update the digest"
    )


@pytest.mark.parametrize(
    ("owner", "method", "parameters"),
    [
        (Consumer, "_commit_offsets", ["self", "offsets", "start_new_transaction"]),
        (ThreadDelegateConsumer, "_commit", ["self", "offsets"]),
        (Consumer, "_new_offset", ["self", "tp"]),
        (Consumer, "_should_commit", ["self", "tp", "offset"]),
        (Consumer, "_wait_next_records", ["self", "timeout"]),
        (Consumer, "_add_gap", ["self", "tp", "offset_from", "offset_to"]),
        (Consumer, "_drain_messages", ["self", "fetcher"]),
        (FaustAIOKafkaConsumer, "_to_message", ["self", "tp", "record"]),
        (FaustAIOKafkaConsumer, "_new_consumer_thread", ["self"]),
        (AIOKafkaConsumerThread, "_create_worker_consumer", ["self", "transport"]),
        (AIOKafkaConsumerThread, "_ensure_consumer", ["self"]),
        (Service, "_crash", ["self", "reason"]),
        (AIOKafkaClient, "fetch_all_metadata", ["self"]),
        (AIOKafkaClient, "send", ["self", "node_id", "request", "group"]),
        (PartitionRecords, "_unpack_records", ["self"]),
    ],
)
def test_every_private_method_the_adapter_uses_has_its_signature(
    owner: type, method: str, parameters: list[str]
) -> None:
    assert _parameters(getattr(owner, method)) == parameters


@pytest.mark.parametrize(
    ("owner", "attribute"),
    [
        (Consumer, "_acked"),
        (Consumer, "_n_acked"),
        (Consumer, "_read_offset"),
        (Consumer, "_committed_offset"),
        (Consumer, "_buffered_partitions"),
        (Consumer, "_commit_every"),
        (FaustAIOKafkaConsumer, "_thread"),
        (Service, "_stopped"),
        (AIOKafkaConsumer, "_fetch_max_wait_ms"),
        (AIOKafkaConsumer, "_client"),
        (AIOKafkaConsumer, "_subscription"),
        (AIOKafkaConsumer, "_coordinator"),
        (AIOKafkaConsumer, "_group_id"),
        (AIOKafkaClient, "_conns"),
        (PartitionRecords, "_tp"),
        (PartitionRecords, "next_fetch_offset"),
        (PartitionRecords, "_records_iterator"),
    ],
)
def test_every_private_attribute_the_adapter_uses_is_defined_there(
    owner: type, attribute: str
) -> None:
    assert _sets(owner, attribute), f"{owner.__qualname__} no longer defines {attribute}"


def test_the_group_coordinator_sends_every_request_through_the_client_the_lease_wraps() -> None:
    """lease_renewals wraps the consumer's client ``send``: aiokafka's group coordinator must
    send heartbeats and SyncGroup requests through it, built with the API keys and the
    ``_generation_id`` the wrapper reads, and answers must carry ``error_code``."""
    send_req = inspect.getsource(GroupCoordinator._send_req)
    assert "await self._client.send(" in send_req
    assert "self._send_req(request)" in inspect.getsource(GroupCoordinator._do_heartbeat)
    assert "self._coordinator._send_req(request)" in inspect.getsource(
        CoordinatorGroupRebalance._send_sync_group_request
    )
    heartbeat = HeartbeatRequest("g", 7, "m")
    sync = SyncGroupRequest("g", 8, "m", None, [])
    assert (heartbeat.API_KEY, heartbeat._generation_id) == (adapter.HEARTBEAT_API_KEY, 7)
    assert (sync.API_KEY, sync._generation_id) == (adapter.SYNC_GROUP_API_KEY, 8)
    for response in (HeartbeatResponse_v1, SyncGroupResponse_v1):
        assert "error_code" in response.SCHEMA.names
    assert adapter.REBALANCE_IN_PROGRESS == 27  # Kafka's protocol error code
    # the LeaveGroup aiokafka sends by itself (max.poll.interval, close) ends the lease
    assert LeaveGroupRequest("g", "m").API_KEY == adapter.LEAVE_GROUP_API_KEY == 13
    assert "await self._send_req(request)" in inspect.getsource(GroupCoordinator._maybe_leave_group)
    assert "await self._maybe_leave_group()" in inspect.getsource(
        GroupCoordinator._heartbeat_routine
    )
    assert set(adapter.NOT_A_MEMBER) == {22, 25, 82}  # illegal generation, unknown member, fenced


def test_the_commits_and_committed_offsets_the_witness_wraps_are_aiokafkas_own() -> None:
    """witness_metadata replaces the aiokafka consumer's ``commit`` and ``committed`` on the
    instance: Faust must commit through ``commit`` with OffsetAndMetadata values, aiokafka's
    seek to the committed offsets must ask ``self.committed`` (so the recovery's seek reads
    the witness), and ``committed`` must be the coordinator's fetch the wrapper repeats."""
    assert "await consumer.commit(aiokafka_offsets)" in inspect.getsource(
        AIOKafkaConsumerThread._commit
    )
    assert "OffsetAndMetadata(offset, " in inspect.getsource(AIOKafkaConsumerThread._commit)
    assert "await self.committed(tp)" in inspect.getsource(AIOKafkaConsumer.seek_to_committed)
    committed = inspect.getsource(AIOKafkaConsumer.committed)
    assert "await self._coordinator.fetch_committed_offsets([partition])" in committed
    assert "committed == -1" in committed
    assert _parameters(GroupCoordinator.fetch_committed_offsets) == ["self", "partitions"]


def test_aiokafka_builds_its_fetcher_from_the_wait_the_adapter_sets() -> None:
    """tuned_fetching sets _fetch_max_wait_ms after construction: it must be read at start."""
    assert "fetch_max_wait_ms=self._fetch_max_wait_ms" in inspect.getsource(AIOKafkaConsumer.start)


def test_no_other_module_reads_a_private_attribute_of_either_library() -> None:
    """The adapter is the only place: other modules reach faust and aiokafka through it."""
    private = re.compile(
        r"\.(_thread|_ensure_consumer|_subscription|_client|_conns|_crash|_committed_offset|"
        r"_fetch_max_wait_ms|_drain_messages|_new_offset|_n_acked|_acked|_read_offset|"
        r"_commit_offsets|_unpack_records|_tp|_coordinator|_group_id|_should_commit)\b"
    )
    offenders = []
    for path in (ROOT / "streamdp").rglob("*.py"):
        if path == Path(adapter.__file__):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if private.search(line.split("#", 1)[0]):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_mode_installs_its_signal_handlers_from_the_attributes_streamdp_replaces() -> None:
    """streamdp.daemon.stop_deadline (SIGTERM, SIGINT) and streamdp.daemon.diagnostics
    (SIGUSR1, SIGUSR2) replace mode's handlers by setting these attributes on the worker before
    it starts; mode must read them when it installs its handlers, or its own would run (for
    SIGUSR1 a dump of frames' local variables, for SIGUSR2 pdb in the daemon's loop)."""
    from mode.worker import Worker

    source = inspect.getsource(Worker._install_signal_handlers_unix)
    for signal_name, attribute in (
        ("SIGTERM", "_on_sigterm"),
        ("SIGINT", "_on_sigint"),
        ("SIGUSR1", "_on_sigusr1"),
        ("SIGUSR2", "_on_sigusr2"),
    ):
        assert f"add_signal_handler(signal.{signal_name}, self.{attribute})" in source, source
