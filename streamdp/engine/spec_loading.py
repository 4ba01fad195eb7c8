"""Loading a stream specification: a TOML file or text into a validated :class:`EngineSpec`.

A configuration names input *sources* (Kafka topics / files of one event kind, each with a
per-source epsilon cap) and *streams* (one continual release each; read by
:func:`streamdp.engine.stream_table.read_stream`). See DESIGN.md §2 and §5 and
``streamdp/examples/*.toml``.

Budget arithmetic is exact: epsilons are read from their decimal text (``tomllib`` with
``parse_float=Decimal``), so ``0.1 + 0.2 <= 0.3`` holds when checking a source's cap.

Every error is a :class:`~streamdp.errors.ConfigError` that names the stream (or source), the
field, what was wrong and what is allowed.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

from streamdp.engine.config_reader import ConfigReader
from streamdp.engine.ledger import exact_sum
from streamdp.engine.spec import EngineSpec, SourceKind, SourceSpec, StreamSpec
from streamdp.engine.stream_table import read_stream
from streamdp.errors import ConfigError

_SOURCE_KEYS = ("topic", "kind", "epsilon_cap", "rho_cap")


def load_spec(path: str | Path) -> EngineSpec:
    """Read and validate a TOML stream specification file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read configuration {str(p)!r}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"cannot read configuration {str(p)!r}: it is not UTF-8 text (byte {error.start + 1} "
            "is not UTF-8); give a TOML spec saved as UTF-8"
        ) from None
    return parse_spec(text, origin=str(p))


def parse_spec(text: str, *, origin: str = "<string>") -> EngineSpec:
    """Validate TOML text; decimals are parsed exactly (``Decimal``)."""
    try:
        data = tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{origin}: not valid TOML: {error}") from None
    return spec_from_dict(data, origin=origin)


def spec_from_dict(data: Mapping[str, Any], *, origin: str = "<config>") -> EngineSpec:
    """Validate a parsed configuration (decimals as ``Decimal``) into an :class:`EngineSpec`."""
    top = ConfigReader(origin, "configuration")
    top.only(data, ("sources", "streams"), "")
    sources_raw = top.table(data.get("sources", {}), "sources")
    streams_raw = top.table(data.get("streams", {}), "streams")
    if not sources_raw:
        raise top.fail("sources", "at least one [sources.<name>] table is required")
    if not streams_raw:
        raise top.fail("streams", "at least one [streams.<name>] table is required")

    sources: dict[str, SourceSpec] = {}
    topics: dict[str, str] = {}
    for name, raw in sources_raw.items():
        ctx = ConfigReader(origin, f"source {name!r}")
        ctx.name(name, "name")
        table = ctx.table(raw, "")
        ctx.only(table, _SOURCE_KEYS, "")
        topic = ctx.name(table.get("topic", name), "topic")
        if topic in topics:
            raise ctx.fail("topic", f"topic {topic!r} is already read by source {topics[topic]!r}")
        topics[topic] = name
        if "kind" not in table:
            raise ctx.fail("kind", "missing; say which event kind it carries: order or person")
        kind = cast(SourceKind, ctx.choice(table["kind"], "kind", ("order", "person")))
        if ("epsilon_cap" in table) == ("rho_cap" in table):
            raise ctx.fail(
                "epsilon_cap",
                "give exactly one cap: epsilon_cap for pure-DP streams (the default), or "
                'rho_cap for zCDP streams (privacy = { definition = "zcdp", rho = ... })',
            )
        if "rho_cap" in table:
            rho_cap = ctx.epsilon(table["rho_cap"], "rho_cap")
            sources[name] = SourceSpec(name, topic, kind, epsilon_cap=None, rho_cap=rho_cap)
        else:
            cap = ctx.epsilon(table["epsilon_cap"], "epsilon_cap")
            sources[name] = SourceSpec(name=name, topic=topic, kind=kind, epsilon_cap=cap)
    # records name their source or its topic interchangeably (a replay maps either one to the
    # source): a source named like another source's topic would make that mapping ambiguous
    for name in sources:
        reader = topics.get(name)
        if reader is not None and reader != name:
            raise ConfigError(
                f"{origin}: source {name!r}: its name is the topic of source {reader!r}, so a "
                f"record naming {name!r} could belong to either; rename the source or the topic "
                "(a source's name may equal only its own topic)"
            )

    streams: dict[str, StreamSpec] = {}
    for name, raw in streams_raw.items():
        ctx = ConfigReader(origin, f"stream {name!r}")
        ctx.name(name, "name")
        streams[name] = read_stream(ctx, name, ctx.table(raw, ""), sources)

    read = {s.source for s in streams.values()}
    for source in sources.values():
        if source.name not in read:
            raise ConfigError(
                f"{origin}: source {source.name!r}: no stream reads it, so its records would be "
                f"read and counted nowhere; add a stream with source = {source.name!r} or remove "
                f"the [sources.{source.name}] table"
            )
    for source in sources.values():
        members = [s for s in streams.values() if s.source == source.name]
        unit = "rho" if source.definition == "zcdp" else "epsilon"
        total = exact_sum(s.budget for s in members)
        if total > source.cap:
            listing = " + ".join(f"{s.name} ({s.budget})" for s in members)
            raise ConfigError(
                f"{origin}: source {source.name!r}: the streams reading it spend {unit} "
                f"{listing} = {total}, over its {unit}_cap {source.cap}; lower their "
                f"{unit}s or raise the cap (streams over one source compose: their {unit}s add)"
            )
    return EngineSpec(sources=sources, streams=streams, raw=_with_file_digests(data, streams))


def _with_file_digests(
    data: Mapping[str, Any], streams: Mapping[str, StreamSpec]
) -> dict[str, Any]:
    """The configuration with the SHA-256 of every places file a stream reads written into its
    counters table (``places_sha256``): the fingerprint then covers the file's content, so a
    snapshot never restores under other places (a pinned digest is the same value)."""
    raw = dict(data)
    digests = {
        name: stream.counters.places.sha256
        for name, stream in streams.items()
        if stream.counters.places is not None
    }
    if not digests:
        return raw
    tables = dict(raw["streams"])
    for name, digest in digests.items():
        table = dict(tables[name])
        table["counters"] = {**table["counters"], "places_sha256": digest}
        tables[name] = table
    raw["streams"] = tables
    return raw
