"""A small Faust app for the broker spike (tests/test_broker_faust.py), run as a subprocess.

``python -m broker_faust_app worker -l info`` with ``tests/`` on ``PYTHONPATH``. Configured by
environment variables (all required unless a default is shown):

SPIKE_BOOTSTRAP      host:port of the broker
SPIKE_APP_ID         Faust app id = consumer group; the changelog topic is ``<id>-state-changelog``
SPIKE_IN, SPIKE_OUT  input and output topics (created by the test, never by Faust)
SPIKE_PARTITIONS     partitions of the input and changelog topics
SPIKE_WEB_PORT       a free port on 127.0.0.1 (the worker binds it even with web_enabled=False)
SPIKE_COMMIT_INTERVAL  broker_commit_interval in seconds (default 1.0)
SPIKE_DURABLE        "1": write the table value to the store and await the changelog delivery
                     before the event is acknowledged (default "0": ``table[key] = value``)
SPIKE_DELAY          seconds to sleep per record, to make a mid-stream kill possible (default 0)
SPIKE_MAX_BATCH      producer_max_batch_size in bytes (default 1: one record per produce batch,
                     the workaround for Tansu's ListOffsets answering the base offset of the
                     last batch + 1 instead of the log end; see docs/dev-broker-notes.md)

SPIKE_GAP_SEEK       "1" (default): on an offset gap, seek back to applied + 1 (see below)

The agent keeps, per input partition p, ONE table value ``{"applied": offset, "count": n,
"sum": s}``: the state and the input offset already applied live in the same changelog record, so
they are recovered together. Offsets of a partition are applied in order:

* offset <= applied: a re-delivered record, skipped (output kind "skip");
* offset == applied + 1: applied (output kind "apply");
* offset > applied + 1: a gap. Faust 0.15.3 can lose records fetched while a partition without a
  committed offset is being assigned (docs/dev-broker-notes.md), so the agent seeks the partition
  back to applied + 1 and ignores records until that offset arrives. If the first record after
  the seek is the same gap offset again, the gap is real (retention, compaction, transaction
  markers) and the record is applied.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import faust

PARTITIONS = int(os.environ["SPIKE_PARTITIONS"])
DURABLE = os.environ.get("SPIKE_DURABLE", "0") == "1"
DELAY = float(os.environ.get("SPIKE_DELAY", "0"))
GAP_SEEK = os.environ.get("SPIKE_GAP_SEEK", "1") == "1"
# partition -> offset of the record that revealed a gap and triggered a seek back
_gap_seen: dict[int, int] = {}

app = faust.App(
    os.environ["SPIKE_APP_ID"],
    broker=f"kafka://{os.environ['SPIKE_BOOTSTRAP']}",
    store="memory://",
    processing_guarantee="at_least_once",
    topic_allow_declare=False,
    topic_disable_leader=True,
    table_standby_replicas=0,
    broker_session_timeout=6.0,
    broker_heartbeat_interval=1.0,
    broker_rebalance_timeout=10.0,
    broker_commit_interval=float(os.environ.get("SPIKE_COMMIT_INTERVAL", "1.0")),
    consumer_auto_offset_reset="earliest",
    producer_max_batch_size=int(os.environ.get("SPIKE_MAX_BATCH", "1")),
    # The worker binds its web server even with web_enabled=False: give each its own port.
    web_enabled=False,
    web_bind="127.0.0.1",
    web_host="127.0.0.1",
    web_port=int(os.environ["SPIKE_WEB_PORT"]),
    datadir=os.environ.get("SPIKE_DATADIR", "/tmp/streamdp-spike-data"),
)

in_topic = app.topic(
    os.environ["SPIKE_IN"], key_type=bytes, value_serializer="json", partitions=PARTITIONS
)
out_topic = app.topic(os.environ["SPIKE_OUT"], key_type=bytes, value_serializer="json")
state = app.Table(
    "state",
    default=None,
    partitions=PARTITIONS,
    schema=faust.Schema(key_serializer="json", value_serializer="json"),
)


@app.agent(in_topic)
async def count(stream: Any) -> None:
    async for event in stream.events():
        p: int = event.message.partition
        o: int = event.message.offset
        key = f"p{p}"
        current = state.get(key) or {"applied": -1, "count": 0, "sum": 0}
        out_key = f"{p}:{o}".encode()
        if o <= current["applied"]:
            await out_topic.send(
                key=out_key, value={"kind": "skip", "p": p, "o": o, "pid": os.getpid()}
            )
            continue
        if GAP_SEEK and o > current["applied"] + 1 and _gap_seen.get(p) != o:
            if p not in _gap_seen:
                _gap_seen[p] = o
                await app.consumer.seek(event.message.tp, current["applied"] + 1)
                print(f"gap in partition {p}: got {o}, applied {current['applied']}; seek")
            continue  # a record fetched before the seek took effect
        _gap_seen.pop(p, None)
        if DELAY:
            await asyncio.sleep(DELAY)
        new = {
            "applied": o,
            "count": current["count"] + 1,
            "sum": current["sum"] + int(event.value["x"]),
        }
        if DURABLE:
            state.data[key] = new
            await state.send_changelog(p, key, new)
        else:
            state[key] = new
        await out_topic.send(key=out_key, value={"kind": "apply", "p": p, "o": o, **new,
                                                 "pid": os.getpid()})


if __name__ == "__main__":
    app.main()
