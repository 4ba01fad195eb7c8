"""Hostile-input campaign (issue 16): >= 10^5 generated records, half of them poison, through one
live worker on the embedded Tansu broker (127.0.0.1); every input offset must be accounted for
and the worker must stay up throughout.

1. generate ``--records`` input records (seeded): good orders of the restaurant spec and hostile
   ones of every kind issue 16 lists (integers of 5,000 digits, lone-surrogate ids, NaN and
   Infinity, deep nesting, huge strings and keys, non-UTF-8 bytes, records of 100 kB, 1 MB and
   2.4 MB, calendar-edge timestamps, duplicate keys, giant quantities, control records on the
   input topic, wrong Kafka keys, exact re-sends, late and far-future events, random bytes);
2. produce them (one partition, so an offset names a record) and start one ``streamdp worker``
   subprocess with a frozen public clock (so every good record counts and no period closes);
3. poll the worker's ``/status`` every 0.25 s until it has read every record (``/metrics``
   ``streamdp_input_records_total``) and the dead-letter topic holds one letter per refused
   record; the worker must never exit, and after its first ready ``/status`` must stay ready;
4. read the dead-letter topic: every hostile record's offset has a dead letter (with its reason),
   no good record's does, and counted + dead-lettered + skipped = input, where counted = input
   read - dead-lettered (the worker's own count of records read) and skipped = offsets the
   worker never reported (must be 0). Every dead letter is checked to fit
   ``MAX_DEAD_LETTER_BYTES`` and to have a UTF-8 key.

    .venv/bin/python benchmarks/hostile_campaign.py [--records 100000] [--seed 16]

Prints a table and writes ``benchmarks/out/hostile_campaign.md`` (with the command line; with
``--write`` the committed ``benchmarks/results/hostile_campaign.md``).
Exits 1 when any check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from daemon_throughput import stop_worker
from prometheus_client.parser import text_string_to_metric_families
from results_dir import add_write_flag, output_dir

from streamdp.broker import EmbeddedBroker, free_loopback_port
from streamdp.daemon.settings import DaemonSettings
from streamdp.daemon.topology import required_topics
from streamdp.demo.worker import die_with_parent
from streamdp.engine import parse_spec
from streamdp.engine.dead_letter_bounds import MAX_DEAD_LETTER_BYTES

HERE = Path(__file__).resolve().parent
TOPIC = "restaurant-orders"
SOURCE_KEY = b"restaurant-orders"
DEAD_LETTER_TOPIC = "streamdp.dead-letter"
# the worker's public clock stands here: day 2024-01-20 is open, earlier days are closed
CLOCK = "2024-01-20T12:00:00Z"
OPEN_DAY = dt.datetime(2024, 1, 20, tzinfo=dt.UTC)
SPEC = """
[sources.restaurant-orders]
topic = "restaurant-orders"
kind = "order"
epsilon_cap = 1.0

[streams.restaurant-items]
source = "restaurant-orders"
epsilon = 1.0
sensitivity = 5
horizon = 4096
mechanism = "fda"
objective = "total"
allowed_lateness = 0
on_epoch_end = "roll"
max_future_periods = 3
period = { unit = "day", timezone = "UTC", start = "2024-01-01" }
counters = { kind = "items", items = ["cola", "burger", "wings", "fries", "nuggets"] }

[streams.restaurant-items.constraints]
kind = "combos"
orders_must_be_combos = true

[streams.restaurant-items.constraints.combos]
combo1 = { cola = 2, burger = 1, wings = 1, nuggets = 1 }
combo2 = { burger = 2, wings = 2, fries = 1 }
combo3 = { cola = 1, burger = 1, fries = 1, nuggets = 1 }
"""
COMBOS = (
    {"cola": 2, "burger": 1, "wings": 1, "nuggets": 1},
    {"burger": 2, "wings": 2, "fries": 1},
    {"cola": 1, "burger": 1, "fries": 1, "nuggets": 1},
)


# ---------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Planned:
    """One input record: its bytes, Kafka key, kind, and whether it must be counted (True),
    dead-lettered (False) or either, as long as it is one of the two (None)."""

    kind: str
    value: bytes
    key: bytes | None = SOURCE_KEY
    good: bool | None = False


def _time(rng: random.Random, day_offset: int = 0) -> str:
    instant = OPEN_DAY + dt.timedelta(days=day_offset, seconds=rng.uniform(0, 86_399))
    return instant.isoformat().replace("+00:00", "Z")


def _order(event_id: str, event_time: str, items: str | None = None, extra: str = "") -> bytes:
    body = items if items is not None else json.dumps(COMBOS[len(event_id) % 3])
    text = f'{{"event_id": "{event_id}", "event_time": "{event_time}", "items": {body}{extra}}}'
    return text.encode()


def _hostile_kinds() -> dict[str, Callable[[random.Random, int], Planned]]:
    def timed(text: str) -> Callable[[random.Random, int], Planned]:
        return lambda rng, n: Planned(
            f"event_time {text}", _order(f"t-{n}", "").replace(b'""', text.encode(), 1)
        )

    kinds: dict[str, Callable[[random.Random, int], Planned]] = {
        "5000-digit quantity": lambda rng, n: Planned(
            "5000-digit quantity", _order(f"d-{n}", _time(rng), '{"cola": ' + "9" * 5000 + "}")
        ),
        "5000-digit extra field": lambda rng, n: Planned(
            "5000-digit extra field", _order(f"e-{n}", _time(rng), extra=', "x": ' + "7" * 5000)
        ),
        "lone-surrogate event_id": lambda rng, n: Planned(
            "lone-surrogate event_id", _order(f"s-{n}\\ud800", _time(rng))
        ),
        "NaN / Infinity": lambda rng, n: Planned(
            "NaN / Infinity",
            _order(f"n-{n}", _time(rng), extra=f', "x": {rng.choice(["NaN", "-Infinity"])}'),
        ),
        "deep nesting": lambda rng, n: Planned(
            "deep nesting", _order(f"r-{n}", _time(rng), extra=', "x": ' + "[" * 5000 + "]" * 5000)
        ),
        "60 kB unknown item name": lambda rng, n: Planned(
            "60 kB unknown item name", _order(f"k-{n}", _time(rng), json.dumps({"k" * 60_000: 1}))
        ),
        "20,000 CJK characters": lambda rng, n: Planned(
            "20,000 CJK characters",
            _order(f"c-{n}", _time(rng), json.dumps({"\u6c34" * 20_000: 1}, ensure_ascii=False)),
        ),
        "non-UTF-8 bytes": lambda rng, n: Planned(
            "non-UTF-8 bytes", _order(f"u-{n}", _time(rng)).replace(b"event_id", b"event\xff\xfe")
        ),
        "random bytes": lambda rng, n: Planned(
            "random bytes", bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 300)))
        ),
        "empty record": lambda rng, n: Planned("empty record", b""),
        "giant quantity": lambda rng, n: Planned(
            "giant quantity", _order(f"q-{n}", _time(rng), '{"cola": ' + str(2**60) + "}")
        ),
        "control record on input": lambda rng, n: Planned(
            "control record on input",
            b'{"type": "control", "action": "close", "stream": "restaurant-items", '
            b'"through": "2034-01-01T00:00:00Z"}',
        ),
        # one partition: every key lands on the source's home partition, which is what
        # ownership checks; the record may be counted or refused, but must be one of the two
        "wrong Kafka key": lambda rng, n: Planned(
            "wrong Kafka key (either outcome)",
            _order(f"w-{n}", _time(rng)),
            key=b"someone-else",
            good=None,
        ),
        "no Kafka key": lambda rng, n: Planned(
            "no Kafka key (either outcome)", _order(f"m-{n}", _time(rng)), key=None, good=None
        ),
        "late event": lambda rng, n: Planned("late event", _order(f"l-{n}", _time(rng, -5))),
        "far-future event": lambda rng, n: Planned(
            "far-future event", _order(f"f-{n}", _time(rng, 30))
        ),
        "not a combo": lambda rng, n: Planned(
            "not a combo", _order(f"x-{n}", _time(rng), '{"cola": 1}')
        ),
        "event_time 9999-12-31T23:59:59Z": timed('"9999-12-31T23:59:59Z"'),
        "event_time 0001-01-01T00:00:00+05:00": timed('"0001-01-01T00:00:00+05:00"'),
        "event_time 1e300": timed("1e300"),
        "event_time -62135596800": timed("-62135596800"),
    }
    return kinds


def plan(n_records: int, seed: int) -> list[Planned]:
    """The campaign's input: about half good orders, the rest every hostile kind in turn, with
    a few records of 100 kB, 1 MB and 2.4 MB, and exact re-sends of good records."""
    rng = random.Random(seed)
    kinds = list(_hostile_kinds().values())
    records: list[Planned] = []
    sizes = [2_400_000] * 2 + [1_000_000] * 8 + [100_000] * 100
    good_sent: list[bytes] = []
    n = 0
    while len(records) < n_records:
        n += 1
        roll = rng.random()
        if sizes and roll < 0.002:
            size = sizes.pop()
            head = _order(f"big-{n}", _time(rng))[:-1] + b', "note": "'
            value = head + b"x" * (size - len(head) - 2) + b'"}'
            records.append(Planned(f"record of {size:,} bytes", value))
        elif roll < 0.5:
            value = _order(f"g-{n}", _time(rng, rng.randrange(0, 3)))
            good_sent.append(value)
            records.append(Planned("good order", value, good=True))
        elif roll < 0.52 and good_sent:
            records.append(Planned("exact re-send of a good order", rng.choice(good_sent)))
        elif roll < 0.53:
            # RFC 8259 leaves duplicate names to the reader: the last one wins, so it counts
            value = (
                _order(f"dup-{n}", _time(rng))[:-1]
                + b', "items": '
                + json.dumps(COMBOS[0]).encode()
                + b"}"
            )
            value = value.replace(b'"items": ', b'"items": {"cola": 99}, "items": ', 1)
            records.append(Planned("duplicate keys (last is good)", value, good=True))
        else:
            records.append(rng.choice(kinds)(rng, n))
    return records[:n_records]


# ---------------------------------------------------------------------------------- broker I/O
async def produce(bootstrap: str, records: list[Planned]) -> list[int]:
    """Produce in order; the offset of each record (-1 when the broker refused it)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        linger_ms=20,
        max_batch_size=256 * 1024,
        max_request_size=4 * 1024 * 1024,
        acks="all",
    )
    await producer.start()
    offsets: list[int] = []
    try:
        pending: list[Any] = []
        for record in records:
            pending.append(await producer.send(TOPIC, record.value, key=record.key, partition=0))
            if len(pending) >= 2000:
                offsets += await _settle(pending)
                pending = []
        offsets += await _settle(pending)
    finally:
        await producer.stop()
    return offsets


async def _settle(pending: list[Any]) -> list[int]:
    results = await asyncio.gather(*pending, return_exceptions=True)
    return [-1 if isinstance(r, BaseException) else int(r.offset) for r in results]


async def read_dead_letters(bootstrap: str, expected: int, deadline: float) -> list[Any]:
    """Every record of the dead-letter topic (stops once ``expected`` are in and no more come
    for 5 s, or at ``deadline``)."""
    consumer = AIOKafkaConsumer(
        DEAD_LETTER_TOPIC,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_bytes=8 * 1024 * 1024,
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    await consumer.start()
    letters: list[Any] = []
    quiet_since = time.monotonic()
    try:
        while time.time() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=10_000)
            got = [m for messages in batch.values() for m in messages]
            letters += got
            if got:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > (5 if len(letters) >= expected else 60):
                break
    finally:
        await consumer.stop()
    return letters


def _get(url: str) -> tuple[int, str] | None:
    try:
        with urllib.request.urlopen(url, timeout=5.0) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), ""
    except OSError:
        return None


def records_read(port: int) -> float:
    answer = _get(f"http://127.0.0.1:{port}/metrics")
    total = 0.0
    for family in text_string_to_metric_families(answer[1] if answer else ""):
        for sample in family.samples:
            if sample.name == "streamdp_input_records_total":
                total += sample.value
    return total


@dataclass
class Watch:
    """``/status`` polled every 0.25 s from a thread: ready or not, and the worker process."""

    port: int
    worker: subprocess.Popen[bytes]
    polls: int = 0
    ready_polls: int = 0
    # answered "not ready" (503 or ready: false) after it was first ready: a failure
    not_ready_after_ready: int = 0
    # no answer within the poll's timeout (the worker's event loop busy): reported, and the
    # longest such stretch with it
    unanswered: int = 0
    longest_silence: float = 0.0
    first_ready: float | None = None
    exited: int | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        last_answer = time.monotonic()
        while not self.stop.is_set():
            if self.worker.poll() is not None:
                self.exited = self.worker.returncode
                return
            answer = _get(f"http://127.0.0.1:{self.port}/status")
            self.polls += 1
            if answer is None:
                if self.first_ready is not None:
                    self.unanswered += 1
                    self.longest_silence = max(self.longest_silence, time.monotonic() - last_answer)
            else:
                last_answer = time.monotonic()
                ready = answer[0] == 200 and bool(json.loads(answer[1]).get("ready"))
                if ready:
                    self.ready_polls += 1
                    self.first_ready = self.first_ready or time.time()
                elif self.first_ready is not None:
                    self.not_ready_after_ready += 1
            self.stop.wait(0.25)


# ---------------------------------------------------------------------------------- the campaign
def campaign(records: list[Planned], work: Path) -> dict[str, Any]:
    spec_path = work / "campaign.toml"
    spec_path.write_text(SPEC)
    spec = parse_spec(SPEC, origin="campaign")
    with EmbeddedBroker(log_path=work / "tansu.log", start_timeout=60) as broker:
        settings = DaemonSettings(config=spec_path, bootstrap=broker.bootstrap, partitions=1)
        broker.create_topics(required_topics(spec, settings))
        t0 = time.time()
        offsets = asyncio.run(produce(broker.bootstrap, records))
        produce_seconds = time.time() - t0
        accepted = [(r, o) for r, o in zip(records, offsets, strict=True) if o >= 0]
        port = free_loopback_port()
        argv = [
            sys.executable, "-m", "streamdp", "worker",
            "--config", str(spec_path),
            "--bootstrap", broker.bootstrap,
            "--partitions", "1",
            "--web-port", str(port),
            "--data-dir", str(work / "data"),
            "--session-timeout", "6",
            "--insecure-seed", "1",
            "--clock", f"frozen:{CLOCK}",
            "--input-volume-metrics",
            "--log-level", "warning",
        ]  # fmt: skip
        with (work / "worker.log").open("ab") as log:
            worker = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),  # noqa: PLW1509 - only calls prctl
            )  # fmt: skip
        watch = Watch(port, worker)
        thread = threading.Thread(target=watch.run, daemon=True)
        thread.start()
        t1 = time.time()
        deadline = t1 + 1800
        try:
            while time.time() < deadline and watch.exited is None:
                if records_read(port) >= len(accepted):
                    break
                time.sleep(0.5)
            read_seconds = time.time() - t1
            hostile = sum(1 for r, _ in accepted if r.good is False)
            letters = asyncio.run(read_dead_letters(broker.bootstrap, hostile, time.time() + 300))
            read = records_read(port)
        finally:
            watch.stop.set()
            thread.join(timeout=5)
            still_up = worker.poll() is None
            stop_worker(worker)
    return {
        "records": records,
        "offsets": offsets,
        "letters": letters,
        "read": read,
        "watch": watch,
        "still_up": still_up,
        "produce_seconds": produce_seconds,
        "read_seconds": read_seconds,
    }


def account(result: dict[str, Any]) -> tuple[list[list[str]], list[str], dict[str, int]]:
    """The per-kind table, the failed checks, and the totals."""
    records: list[Planned] = result["records"]
    offsets: list[int] = result["offsets"]
    by_offset: dict[int, list[dict[str, Any]]] = {}
    failures: list[str] = []
    too_big = 0
    for message in result["letters"]:
        key = message.key or b""
        size = len(key) + len(message.value or b"")
        too_big += size > MAX_DEAD_LETTER_BYTES
        key.decode("utf-8")
        letter = json.loads(message.value)
        by_offset.setdefault(letter.get("offset"), []).append(letter)
    if too_big:
        failures.append(f"{too_big} dead letters over MAX_DEAD_LETTER_BYTES")
    rows: dict[str, dict[str, Any]] = {}
    counted = dead = refused_by_broker = wrong = 0
    for record, offset in zip(records, offsets, strict=True):
        row = rows.setdefault(
            record.kind, {"sent": 0, "counted": 0, "dead": 0, "broker": 0, "reasons": Counter()}
        )
        row["sent"] += 1
        if offset < 0:
            row["broker"] += 1
            refused_by_broker += 1
            continue
        got = by_offset.pop(offset, [])
        if got:
            dead += 1
            row["dead"] += 1
            row["reasons"].update(letter["reason"] for letter in got)
            if record.good is True:
                wrong += 1
        else:
            counted += 1
            row["counted"] += 1
            if record.good is False:
                wrong += 1
    input_records = sum(1 for o in offsets if o >= 0)
    skipped = input_records - int(result["read"])
    if wrong:
        failures.append(f"{wrong} records not handled as planned (good refused or bad counted)")
    if by_offset:
        failures.append(f"{len(by_offset)} dead letters name no input offset")
    if skipped:
        failures.append(f"{skipped} input records the worker never reported reading")
    if counted + dead != input_records:
        failures.append("counted + dead-lettered != input")
    watch: Watch = result["watch"]
    if watch.exited is not None or not result["still_up"]:
        failures.append(f"the worker exited (status {watch.exited})")
    if watch.first_ready is None or watch.not_ready_after_ready:
        failures.append(f"/status not ready on {watch.not_ready_after_ready} polls after ready")
    table = [
        [
            kind,
            f"{row['sent']:,}",
            f"{row['counted']:,}",
            f"{row['dead']:,}",
            f"{row['broker']:,}",
            ", ".join(f"{r} {n:,}" for r, n in row["reasons"].most_common()) or "-",
        ]
        for kind, row in sorted(rows.items(), key=lambda kv: -kv[1]["sent"])
    ]
    totals = {
        "input": input_records,
        "counted": counted,
        "dead_lettered": dead,
        "skipped": skipped,
        "refused_by_broker": refused_by_broker,
        "dead_letters": len(result["letters"]),
        "status_polls": watch.polls,
        "status_ready_polls": watch.ready_polls,
        "status_not_ready": watch.not_ready_after_ready,
        "status_unanswered": watch.unanswered,
    }
    return table, failures, totals


def render(
    table: list[list[str]], failures: list[str], totals: dict[str, int], result: dict[str, Any],
    command: str,
) -> str:  # fmt: skip
    head = ["kind", "sent", "counted", "dead-lettered", "refused by broker", "reasons"]
    lines = [
        "# Hostile-input campaign (issue 16)",
        "",
        f"Command: `{command}`",
        (
            f"Run: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}; one worker on the "
            f"embedded Tansu broker (127.0.0.1), one partition, public clock frozen at {CLOCK}."
        ),
        "",
        "| " + " | ".join(head) + " |",
        "|---|---:|---:|---:|---:|---|",
        *("| " + " | ".join(row) + " |" for row in table),
        "",
        (
            f"- input records (offsets): {totals['input']:,}; counted {totals['counted']:,} + "
            f"dead-lettered {totals['dead_lettered']:,} + skipped {totals['skipped']:,} = "
            f"{totals['counted'] + totals['dead_lettered'] + totals['skipped']:,}"
        ),
        f"- refused by the broker before reaching the topic: {totals['refused_by_broker']:,}",
        (
            f"- dead letters read: {totals['dead_letters']:,}, every one at most "
            f"{MAX_DEAD_LETTER_BYTES:,} bytes (key + value) with a UTF-8 key"
        ),
        (
            f"- worker: {totals['status_polls']:,} /status polls, "
            f"{totals['status_ready_polls']:,} answered ready, "
            f"{totals['status_not_ready']:,} answered not ready after the first ready, "
            f"{totals['status_unanswered']:,} unanswered within 5 s (longest silence "
            f"{result['watch'].longest_silence:.1f} s: the event loop busy); never exited: "
            f"{'yes' if result['watch'].exited is None and result['still_up'] else 'NO'}"
        ),
        (
            f"- produce {result['produce_seconds']:.1f} s; worker read everything in "
            f"{result['read_seconds']:.1f} s"
        ),
        "",
        "Result: " + ("PASS" if not failures else "FAIL: " + "; ".join(failures)),
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=16)
    add_write_flag(parser)
    args = parser.parse_args()
    records = plan(args.records, args.seed)
    with tempfile.TemporaryDirectory(prefix="streamdp-hostile-") as tmp:
        result = campaign(records, Path(tmp))
        table, failures, totals = account(result)
        if failures:
            log = (Path(tmp) / "worker.log").read_text(errors="replace")[-3000:]
            print("worker log tail:\n" + log, file=sys.stderr)
    command = f".venv/bin/python benchmarks/hostile_campaign.py --records {args.records}" + (
        f" --seed {args.seed}" if args.seed != 16 else ""
    )
    text = render(table, failures, totals, result, command)
    print(text)
    target = output_dir(args.write) / "hostile_campaign.md"
    target.write_text(text)
    print(f"wrote {target}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
