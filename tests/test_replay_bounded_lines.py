"""A replay holds no input line whole beyond what a record may be (audit of 2026-11-28: one
1.5 GB line took the replay from 124 MB to 7.3 GB and, under a memory limit, ended it with
``MemoryError`` before anything was released: one record decided whether anything was).

- :func:`bounded_lines` against the reference (a binary file's own ``readlines``) on many
  random files of short lines with every kind of line ending, a tiny chunk size and limits
  around the lines' lengths: the same lines, as the file gives them when their content is
  within the limit, else its first ``limit + 1`` bytes, whether it is blank and the whole
  content's length and SHA-256;
- a replay with a 24 MiB line among ordinary records: its memory peak stays far below the
  line (the line read whole would take it above), the line's dead letter gives the whole
  line's length, digest and size in its message, and the releases are those of the file
  without it (same seeded noise).
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import tracemalloc
from pathlib import Path

import pytest

import streamdp.engine.bounded_lines as bounded
from streamdp.engine.bounded_lines import Overlong, bounded_lines
from streamdp.engine.events import MAX_RECORD_BYTES
from streamdp.engine.replay import read_jsonl, replay
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec, generate, release_instant


def test_bounded_lines_match_the_files_own_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounded, "CHUNK_BYTES", 7)
    rng = random.Random(1)
    alphabet = [b"a", b" ", b"\r", b"\n", b"\t", b"{", b"\xc3\xa9"]
    cut = whole = 0
    for _ in range(5000):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        limit = rng.randint(0, 12)
        reference = io.BytesIO(data).readlines()
        got = list(bounded_lines(io.BytesIO(data), limit))
        assert len(got) == len(reference), (data, limit)
        for line, mine in zip(reference, got, strict=True):
            content = line.rstrip(b"\r\n")
            if len(content) <= limit:
                whole += 1
                assert type(mine) is bytes
                # as the file gives it, or (an ending of many CRs) its content and a newline
                assert mine == line or (mine == content + b"\n" and len(line) >= limit + 1)
            else:
                cut += 1
                assert isinstance(mine, Overlong)
                assert mine.head == line[: limit + 1]
                assert mine.bytes_read == len(line)
                assert mine.blank == (not line.strip())
                assert mine.length == len(content)
                assert mine.sha256 == hashlib.sha256(content).hexdigest()
    assert cut > 1000  # both cases were exercised, many times
    assert whole > 1000


def test_a_huge_line_is_refused_without_being_held_and_changes_no_release(
    tmp_path: Path,
) -> None:
    spec = example_spec("hiv")
    lines = [line.text.encode() for line in generate("hiv", periods=3, rate=20, seed=4)]
    huge = b'{"event_id": "x", "padding": "' + b"\r" * 3 + b"y" * (24 << 20) + b'"}'
    as_of = release_instant(spec, 3)
    outputs = {}
    peaks = {}
    for name, content in (("d", lines), ("d_plus_r", [*lines[:5], huge, *lines[5:]])):
        events = tmp_path / f"{name}.jsonl"
        events.write_bytes(b"".join(line + b"\r\n" for line in content))
        tracemalloc.start()
        try:
            replay(spec, events, tmp_path / name, as_of=as_of, sampler=InsecureSeededSampler(3))
            peaks[name] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        outputs[name] = tmp_path / name
    # a few chunks, whatever the line's length: far below its 24 MiB (read whole, the peak
    # was above it)
    assert peaks["d_plus_r"] < peaks["d"] + 8 * MAX_RECORD_BYTES + 4 * bounded.CHUNK_BYTES
    assert peaks["d_plus_r"] < len(huge) / 4
    assert read_jsonl(outputs["d_plus_r"] / "releases.jsonl") == read_jsonl(
        outputs["d"] / "releases.jsonl"
    )
    (letter,) = [
        json.loads(line)
        for line in (outputs["d_plus_r"] / "dead_letter.jsonl").read_text().splitlines()
        if json.loads(line)["offset"] == 6
    ]
    assert letter["reason"] == "too_large"
    assert letter["raw_length"] == len(huge)
    assert letter["raw_sha256"] == hashlib.sha256(huge).hexdigest()
    assert letter["raw_truncated"] is True
    assert f"record is {len(huge)} bytes" in letter["message"]
