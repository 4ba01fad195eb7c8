"""Synthetic input generators (seeded numpy randomness allowed: it makes events, not noise)."""

from streamdp.synth.generators import (
    SCENARIOS,
    Line,
    example_spec,
    generate,
    generated_end,
    release_instant,
)

__all__ = [
    "SCENARIOS",
    "Line",
    "example_spec",
    "generate",
    "generated_end",
    "release_instant",
]
