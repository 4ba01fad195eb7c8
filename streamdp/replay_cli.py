"""``streamdp replay``: run the release engine over a JSON-lines file (no Kafka needed)."""

from __future__ import annotations

import argparse
import os
import sys
import time

from streamdp.engine.periods import format_instant, parse_instant
from streamdp.engine.privacy_unit import load_unit_key
from streamdp.engine.replay import replay
from streamdp.engine.replay_check import check_input
from streamdp.engine.spec_loading import load_spec
from streamdp.errors import ConfigError
from streamdp.noise import InsecureSeededSampler, NoiseSampler, production_sampler
from streamdp.noise.insecure import check_insecure_seed
from streamdp.progress import progress_stream


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, metavar="SPEC", help="stream spec (TOML)")
    parser.add_argument(
        "--input",
        required=True,
        metavar="EVENTS",
        help="events, JSON Lines: one JSON object per line (UTF-8; a leading byte-order mark is "
        "skipped). A name ending in another format (.csv, .toml, .gz, ...) is refused; the "
        "records are never looked at before the replay (one record must not decide whether "
        "anything is published): check a file first with --check-input",
    )
    parser.add_argument(
        "--output-dir",
        default=None,
        metavar="DIR",
        help="(required unless --check-input) writes releases.jsonl, consistent.jsonl, "
        "dead_letter.jsonl, ledger.jsonl, "
        "snapshot.json (the last two and the dead letters are protected like the input)",
    )
    parser.add_argument(
        "--as-of",
        default=None,
        metavar="INSTANT",
        help="the public instant the release is made at: every period whose end plus allowed "
        "lateness is at or before it is released (RFC 3339 with offset, e.g. "
        "2025-01-01T00:00:00Z, or 'now'); the file is one batch and every valid event in it "
        "counts, whatever the other events' times",
    )
    parser.add_argument(
        "--check-input",
        action="store_true",
        help="judge every line as the replay would and print the numbers it would count and "
        "reject, by reason, with a hint when the file looks like another format; spends "
        "nothing and writes nothing (the numbers come from raw records: protected)",
    )
    parser.add_argument(
        "--show-counts",
        action="store_true",
        help="print the run time and the numbers of lines read, events accepted and records "
        "rejected (derived from the raw input: the time grows with the records read; keep "
        "them off public surfaces)",
    )
    parser.add_argument(
        "--insecure-seed",
        type=int,
        default=None,
        metavar="N",
        help="INSECURE: seeded numpy noise for reproducible tests; never publish its output "
        "(default: OpenDP's exact sampler with OS entropy)",
    )
    parser.add_argument(
        "--unit-key-file",
        default=os.environ.get("STREAMDP_UNIT_KEY_FILE"),
        metavar="FILE",
        help="the secret key privacy-unit identifiers are hashed under (streams with a "
        "privacy_unit; env STREAMDP_UNIT_KEY_FILE); default: a one-off random key, so the "
        "snapshot restores nowhere",
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        help="report progress on stderr even when it is not a terminal (on a terminal: always); "
        "the share of the input read over time reflects the input's size, like --show-counts",
    )


def run(args: argparse.Namespace) -> int:
    if args.as_of is None:
        raise ConfigError(
            "--as-of is required: the public instant the release is made at (RFC 3339 with an "
            "offset, or 'now'); for a file from `streamdp synth`, the instant it printed "
            "('every generated period is released by: ... --as-of INSTANT')"
        )
    check_insecure_seed(args.insecure_seed)
    if args.check_input and args.output_dir is not None:
        raise ConfigError(
            "--check-input checks the input and writes nothing: drop --output-dir (or drop "
            "--check-input to replay)"
        )
    spec = load_spec(args.config)
    if args.unit_key_file is not None and all(
        s.privacy_unit is None for s in spec.streams.values()
    ):
        raise ConfigError(
            f"--unit-key-file keys a privacy unit's identifiers, and no stream of "
            f"{args.config!r} has a privacy_unit: drop --unit-key-file"
        )
    sampler: NoiseSampler
    if args.insecure_seed is not None:
        sampler = InsecureSeededSampler(args.insecure_seed)
        sys.stderr.write(
            "streamdp replay: WARNING: --insecure-seed uses predictable noise; the releases "
            "are NOT differentially private\n"
        )
    else:
        sampler = production_sampler()
    as_of = parse_as_of(args.as_of)
    unit_key = None if args.unit_key_file is None else load_unit_key(args.unit_key_file)
    if args.check_input:
        check = check_input(spec, args.input, as_of=as_of, unit_key=unit_key)
        sys.stdout.write(f"as of {format_instant(as_of)}\n{check.render()}\n")
        return 0
    if args.output_dir is None:
        raise ConfigError(
            "--output-dir is required: the directory the releases, the ledger and the snapshot "
            "are written to (or give --check-input to check the input without a replay)"
        )
    summary = replay(
        spec,
        args.input,
        args.output_dir,
        as_of=as_of,
        sampler=sampler,
        progress=progress_stream(args.progress),
        unit_key=unit_key,
    )
    for name, epochs in summary.many_epochs().items():
        sys.stderr.write(
            f"streamdp replay: WARNING: --as-of {format_instant(as_of)} releases {epochs} "
            f"epochs of stream {name!r}: {summary.stream_unit(name)} "
            f"{summary.summed_spend[name]} summed over them (the loss of one event in every "
            "epoch, or of one privacy unit over the epochs); if that is not meant, do not "
            "publish this output: delete it and replay with an earlier --as-of\n"
        )
    sys.stdout.write(f"as of {format_instant(as_of)}\n")
    sys.stdout.write(summary.render(show_counts=args.show_counts) + "\n")
    return 0


def parse_as_of(text: str) -> float:
    """``--as-of``: 'now' (the wall clock) or an RFC 3339 instant with a UTC offset."""
    if text.strip().lower() == "now":
        return time.time()
    instant = parse_instant(text)
    if instant is None or parse_instant_number(text) is not None:
        raise ConfigError(
            f"--as-of {text!r} is not an instant: give RFC 3339 text with an offset "
            "(e.g. 2025-01-01T00:00:00Z) or 'now'"
        )
    return instant


def parse_instant_number(text: str) -> float | None:
    """``text`` as a plain number, if it is one (refused for --as-of: ambiguous units)."""
    try:
        return float(text)
    except ValueError:
        return None
