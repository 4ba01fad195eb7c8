"""``streamdp tail``: readable, safe rendering of any topic, checked against the real broker."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaProducer

from streamdp.broker import EmbeddedBroker
from streamdp.cli import main
from streamdp.record_words import TailRecord, format_json, format_pretty

BINARY = bytes(range(256))


def _record(key: bytes | None, value: bytes | None) -> TailRecord:
    return TailRecord("t", 2, 17, 1_700_000_000_000, key, value)


def test_pretty_is_one_compact_line_per_record_with_key() -> None:
    line = format_pretty(_record(b"s1:c0", json.dumps({"count": 3, "eps": 0.5}, indent=4).encode()))
    assert line == 'p2@17 2023-11-14T22:13:20.000000Z "s1:c0" {"count":3,"eps":0.5}'


def test_pretty_never_prints_control_characters_or_raw_binary() -> None:
    text = format_pretty(_record(None, b"bad\x1b[31m\nline"))
    binary = format_pretty(_record(BINARY[128:131], BINARY))
    for line in (text, binary):
        assert "\n" not in line
        assert "\x1b" not in line
        assert line.isprintable()
    assert text.endswith(r'"bad\u001b[31m\nline"')
    assert "<256 bytes 0x000102" in binary
    assert "<3 bytes 0x808182>" in binary
    assert format_pretty(_record(b"k", None)).endswith('"k" null')


def test_json_format_round_trips_every_kind_of_value() -> None:
    for value in (b'{"a": [1, 2]}', b"plain text", BINARY, None):
        parsed = json.loads(format_json(_record(b"k", value)))
        assert (parsed["partition"], parsed["offset"]) == (2, 17)
        assert parsed["key"] == {"text": "k"}
        got = parsed["value"]
        if value is None:
            assert got is None
        elif "json" in got:
            assert got["json"] == json.loads(value)
        elif "text" in got:
            assert got["text"].encode() == value
        else:
            assert base64.b64decode(got["base64"]) == value


def test_bad_arguments_are_config_errors(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STREAMDP_BOOTSTRAP", raising=False)
    assert main(["tail", "--topic", "x"]) == 2
    assert "STREAMDP_BOOTSTRAP" in capsys.readouterr().err
    assert main(["tail", "--topic", "x", "--bootstrap", "127.0.0.1:1", "--max", "0"]) == 2
    assert "--max" in capsys.readouterr().err
    assert main(["tail", "--topic", "x", "--bootstrap", "not an address"]) == 2
    assert "HOST:PORT" in capsys.readouterr().err


async def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, value in records:
            await producer.send_and_wait(topic, value, key=key, partition=0)
    finally:
        await producer.stop()


@pytest.mark.broker
def test_tail_prints_existing_records_from_the_beginning(
    broker: EmbeddedBroker, new_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    topic = new_topic(1)
    records = [(b"a", b'{"v": 1}'), (b"b", BINARY), (b"c", None)]
    asyncio.run(_produce(broker.bootstrap, topic, records))
    code = main(
        [
            "tail",
            "--topic",
            topic,
            "--bootstrap",
            broker.bootstrap,
            "--from-beginning",
            "--format",
            "json",
            "--max",
            "3",
        ]
    )
    assert code == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["offset"] for line in lines] == [0, 1, 2]
    assert lines[0]["value"] == {"json": {"v": 1}}
    assert base64.b64decode(lines[1]["value"]["base64"]) == BINARY
    assert lines[2]["value"] is None


@pytest.mark.broker
def test_tail_without_from_beginning_shows_only_new_records(
    broker: EmbeddedBroker, new_topic: Callable[..., str]
) -> None:
    """Old records sit in one multi-record batch, where Tansu's ListOffsets points inside it."""
    topic = new_topic(1)

    async def old_batch() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=100)
        await producer.start()
        try:
            await asyncio.gather(
                *[await producer.send(topic, b'"old"', partition=0) for _ in range(5)]
            )
        finally:
            await producer.stop()

    asyncio.run(old_batch())
    env = {**os.environ, "STREAMDP_BOOTSTRAP": broker.bootstrap}
    tail = subprocess.Popen(
        [sys.executable, "-m", "streamdp", "tail", "--topic", topic, "--max", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # tail says when its positions are resolved: what is produced after that is printed
        assert tail.stderr is not None
        assert "reading" in tail.stderr.readline()
        asyncio.run(_produce(broker.bootstrap, topic, [(b"n1", b'"new1"'), (b"n2", b'"new2"')]))
        out, err = tail.communicate(timeout=30)
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.communicate()
    assert tail.returncode == 0, err
    lines = out.splitlines()
    assert [line.split(" ", 2)[2] for line in lines] == ['"n1" "new1"', '"n2" "new2"']


@pytest.mark.broker
def test_tail_of_a_missing_topic_names_the_existing_ones(
    broker: EmbeddedBroker, new_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    existing = new_topic(1)
    assert main(["tail", "--topic", "no-such-topic", "--bootstrap", broker.bootstrap]) == 2
    err = capsys.readouterr().err
    assert "no-such-topic" in err
    assert existing in err
