"""Synthetic input for a worker on the wall clock: a spec whose periods start now, and events
stamped with the moment they are sent (``streamdp produce``).

The example specs start on 2024-01-01 with day and month periods: a worker on the wall clock
would first release every period since then (about a thousand days, several epochs), and the
next period closes only tomorrow. :func:`live_spec_text` rewrites an example spec so that every
stream has short fixed periods starting at the current one, with an allowed lateness to match;
:func:`live_events` turns the synthetic generator's events into events of the present.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from streamdp.engine.periods import format_instant
from streamdp.engine.spec import EngineSpec
from streamdp.errors import ConfigError
from streamdp.synth.generators import EXAMPLE_FILES, example_spec, generate

__all__ = [
    "LiveEvent",
    "check_scenario_fits",
    "live_events",
    "live_lateness_seconds",
    "live_spec_text",
]

_PERIOD_LINE = re.compile(r"^period = \{[^}\n]*\}$", re.M)
_LATENESS_LINE = re.compile(r'^allowed_lateness = "[^"\n]*"$', re.M)
_PLACES_LINE = re.compile(r'^places = "([^"\n]+)"$', re.M)
_COMMENT_LINE = re.compile(r"^#[^\n]*\n", re.M)
_WORDING_LINE = re.compile(r'^(?:title|description) = "[^"\n]*"$', re.M)
#: The examples' calendar wording in titles and descriptions, and what it becomes for fixed
#: periods ({period}: "period of 60 s"); an epoch of the examples' day and month streams is a
#: year, hence "a year" -> "an epoch".
_PERIOD_WORDS = (
    (
        re.compile(r"\b(?:on|in) at most (\d+) (?:days|months) a year\b"),
        r"in at most \1 periods an epoch",
    ),
    (re.compile(r"\bper (?:calendar )?(?:day|month)\b"), "per {period}"),
    (re.compile(r"\b(once|twice) a (?:day|month)\b"), r"\1 a period"),
)


def live_lateness_seconds(period_seconds: int) -> int:
    """The allowed lateness of a live spec's periods: a tenth of a period, at least 5 s (the
    time a record may take from its producer to the worker)."""
    return max(5, period_seconds // 10)


def live_spec_text(
    example_text: str, period_seconds: int, now: float, *, examples_dir: Path | None = None
) -> str:
    """``example_text`` (an example spec) with every stream's ``period`` replaced by fixed
    periods of ``period_seconds`` starting at the one holding ``now``, and its
    ``allowed_lateness`` by :func:`live_lateness_seconds`; with ``examples_dir`` (the folder
    the example is in), a places file named relative to it becomes its absolute path, so the
    written spec finds it from anywhere. Raises ValueError when the text has no period line per
    lateness line (not an example spec's layout)."""
    if period_seconds < 1:
        raise ValueError(f"periods must be at least 1 s long, got {period_seconds}")
    periods = _PERIOD_LINE.findall(example_text)
    latenesses = _LATENESS_LINE.findall(example_text)
    if not periods or len(periods) != len(latenesses):
        raise ValueError("expected one 'period = {...}' and one 'allowed_lateness' per stream")
    start = format_instant(math.floor(now / period_seconds) * period_seconds)
    period = f'period = {{ unit = "fixed", length = "{period_seconds}s", start = "{start}" }}'
    lateness = f'allowed_lateness = "{live_lateness_seconds(period_seconds)}s"'
    header = (
        f"# Written by `streamdp produce --write-spec`: periods of {period_seconds} s from "
        f"{start}, for a worker on the wall clock.\n"
        "# (From an example spec; its comments, which describe its calendar periods, are left "
        "out.)\n"
    )
    text = _PERIOD_LINE.sub(period, _COMMENT_LINE.sub("", example_text))
    text = _WORDING_LINE.sub(lambda m: fixed_period_wording(m.group(0), period_seconds), text)
    if examples_dir is not None:
        text = _PLACES_LINE.sub(
            lambda m: (
                f'places = "{(examples_dir / m.group(1)).resolve()}"'
                if not Path(m.group(1)).is_absolute()
                else m.group(0)
            ),
            text,
        )
    return header + _LATENESS_LINE.sub(lateness, text)


def fixed_period_wording(text: str, period_seconds: int) -> str:
    """``text`` (an example's title or description) with its day and month wording ("per
    day", "once a month", "on at most 12 days a year") said of periods of ``period_seconds``."""
    for pattern, replacement in _PERIOD_WORDS:
        text = pattern.sub(replacement.format(period=f"period of {period_seconds} s"), text)
    return text


@dataclass(frozen=True)
class LiveEvent:
    """One record to send: its topic, key (the source name) and value; ``bad`` for the
    generator's deliberately invalid records."""

    topic: str
    key: bytes
    value: bytes
    bad: bool


def live_events(
    scenario: str, spec: EngineSpec, *, seed: int, bad_fraction: float
) -> Iterator[LiveEvent]:
    """Endless events of ``scenario`` for ``spec``'s source of that kind, without their event
    time: :func:`stamped` gives each the moment it is sent. Every event id is new (``live-N``)."""
    source = _source_of(scenario, spec)
    topic = spec.sources[source].topic
    number = 0
    while True:
        for line in generate(scenario, 1000, 1000.0, seed=seed, bad_fraction=bad_fraction):
            if line.expect is not None:
                yield LiveEvent(topic, source.encode(), line.text.encode(), True)
                continue
            number += 1
            event = json.loads(line.text)
            event["event_id"] = f"live-{seed}-{number}"
            event["source"] = source
            yield LiveEvent(topic, source.encode(), json.dumps(event).encode(), False)
        seed += 1


#: Why a record may be refused for its time or its repetition rather than its content.
_TIMING_REASONS = frozenset(
    {"late", "before_start", "after_horizon", "too_far_in_future", "duplicate_event"}
)


def check_scenario_fits(scenario: str, spec: EngineSpec, sample: int = 50) -> None:
    """:class:`ConfigError` when a stream of ``spec`` would refuse every event of ``scenario``
    for its content (a missing privacy-unit field, an unknown item or category): ``sample``
    good events, stamped inside every stream's first period, go through an engine over the
    spec (insecure noise, a throwaway unit key: nothing of it leaves this check)."""
    from itertools import islice

    from streamdp.engine.engine import Engine
    from streamdp.engine.periods import PeriodClock
    from streamdp.engine.privacy_unit import MIN_KEY_BYTES
    from streamdp.noise import InsecureSeededSampler

    source = _source_of(scenario, spec)
    streams = [s for s in spec.streams.values() if s.source == source]
    at = max(PeriodClock(s.period).bounds(0)[0] for s in streams) + 1.0
    engine = Engine(
        spec, sampler=InsecureSeededSampler(0), batch=True, unit_key=b"\0" * MIN_KEY_BYTES
    )
    engine.start_batch(at)
    counted: set[str] = set()
    refused: dict[str, str] = {}
    good = (e for e in live_events(scenario, spec, seed=0, bad_fraction=0.0) if not e.bad)
    for event in islice(good, sample):
        result = engine.ingest(stamped(event, at))
        counted.update(result.accepted)
        for rejection in result.rejections:
            if rejection.stream is not None and rejection.reason not in _TIMING_REASONS:
                refused.setdefault(rejection.stream, f"{rejection.reason}: {rejection.message}")
    misfits = sorted(name for name in refused if name not in counted)
    if misfits:
        name = misfits[0]
        raise ConfigError(
            f"stream {name!r} refuses every {scenario} event ({refused[name]}); send the "
            f"scenario its spec was written for (the examples: "
            + ", ".join(f"{s} -> {f}" for s, f in sorted(EXAMPLE_FILES.items()))
            + ")"
        )


def stamped(event: LiveEvent, now: float) -> bytes:
    """``event``'s value with ``event_time`` set to ``now`` (bad records are sent as they are)."""
    if event.bad:
        return event.value
    body = json.loads(event.value)
    body["event_time"] = format_instant(now)
    return json.dumps(body).encode()


def _source_of(scenario: str, spec: EngineSpec) -> str:
    """The source of ``spec`` whose events ``scenario`` imitates (the example's own source)."""
    wanted = next(iter(example_spec(scenario).sources))
    if wanted in spec.sources:
        return wanted
    kind = example_spec(scenario).sources[wanted].kind
    same_kind = [name for name, s in spec.sources.items() if s.kind == kind]
    if len(same_kind) != 1:
        raise ConfigError(
            f"the spec has {len(same_kind)} sources of kind {kind!r} (the {scenario} scenario's): "
            "name the source like the example's, " + repr(wanted)
        )
    return same_kind[0]
