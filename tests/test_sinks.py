"""The sink interface (issue 15): the replay writes through any sink, records route by kind.

A sink written in a test (a list per kind) receives exactly what the JSON-lines directory sink
writes for the same input and seed; the daemon's topics route the same three kinds."""

from __future__ import annotations

from pathlib import Path

from streamdp.daemon.routing import OutputTopics
from streamdp.engine.records import AnyRecord
from streamdp.engine.replay import read_jsonl, replay
from streamdp.engine.sinks import FILE_OF_KIND
from streamdp.noise import InsecureSeededSampler
from streamdp.synth import example_spec, generate, release_instant


class ListSink:
    """A whole sink in five lines: what 'adding a sink is one new class' means."""

    def __init__(self) -> None:
        self.records: list[AnyRecord] = []
        self.closed = False

    def write(self, record: AnyRecord) -> None:
        self.records.append(record)

    def close(self) -> None:
        self.closed = True


def _events(tmp_path: Path) -> Path:
    lines = [line.text for line in generate("restaurant", 20, 30, seed=5, bad_fraction=0.1)]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_custom_sink_gets_what_the_directory_sink_writes(tmp_path: Path) -> None:
    spec = example_spec("restaurant")
    events = _events(tmp_path)
    as_of = release_instant(spec, 20)
    replay(spec, events, tmp_path / "files", as_of=as_of, sampler=InsecureSeededSampler(3))
    sink = ListSink()
    replay(
        spec, events, tmp_path / "custom", as_of=as_of, sampler=InsecureSeededSampler(3), sink=sink
    )
    assert sink.closed
    kinds = {record.kind for record in sink.records}
    assert kinds == {"release", "consistent", "dead_letter"}
    for kind, name in FILE_OF_KIND.items():
        written = read_jsonl(tmp_path / "files" / name)
        received = [r.to_dict() for r in sink.records if r.kind == kind]
        assert received == written, kind
        assert written, f"no {kind} record: the comparison would prove nothing"
    # the custom sink took the outputs: its directory holds only the ledger and the snapshot
    assert sorted(p.name for p in (tmp_path / "custom").iterdir()) == [
        "ledger.jsonl",
        "snapshot.json",
    ]


def test_topics_route_every_kind_of_record(tmp_path: Path) -> None:
    spec = example_spec("restaurant")
    sink = ListSink()
    replay(
        spec,
        _events(tmp_path),
        tmp_path / "out",
        as_of=release_instant(spec, 20),
        sampler=InsecureSeededSampler(3),
        sink=sink,
    )
    topics = OutputTopics.in_namespace("ns")
    routed = {(r.kind, topics.for_record(r)) for r in sink.records}
    assert routed == {
        ("release", "ns.releases"),
        ("consistent", "ns.consistent"),
        ("dead_letter", "ns.dead-letter"),
    }
