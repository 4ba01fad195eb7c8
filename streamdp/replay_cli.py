"""``streamdp replay``: run the release engine over a JSON-lines file (no Kafka needed)."""

from __future__ import annotations

import argparse
import sys

from streamdp.engine.replay import replay
from streamdp.engine.spec import load_spec
from streamdp.noise import InsecureSeededSampler, NoiseSampler, production_sampler


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, metavar="SPEC", help="stream spec (TOML)")
    parser.add_argument("--input", required=True, metavar="EVENTS", help="events, JSON lines")
    parser.add_argument(
        "--output-dir",
        required=True,
        metavar="DIR",
        help="writes releases.jsonl, consistent.jsonl, dead_letter.jsonl, ledger.jsonl, "
        "snapshot.json (the last two and the dead letters are protected like the input)",
    )
    parser.add_argument(
        "--insecure-seed",
        type=int,
        default=None,
        metavar="N",
        help="INSECURE: seeded numpy noise for reproducible tests; never publish its output "
        "(default: OpenDP's exact sampler with OS entropy)",
    )


def run(args: argparse.Namespace) -> int:
    spec = load_spec(args.config)
    sampler: NoiseSampler
    if args.insecure_seed is not None:
        sampler = InsecureSeededSampler(args.insecure_seed)
        sys.stderr.write(
            "streamdp replay: WARNING: --insecure-seed uses predictable noise; the releases "
            "are NOT differentially private\n"
        )
    else:
        sampler = production_sampler()
    summary = replay(spec, args.input, args.output_dir, sampler=sampler, progress=sys.stderr)
    sys.stdout.write(summary.render() + "\n")
    return 0
