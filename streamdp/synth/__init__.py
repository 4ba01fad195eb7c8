"""Synthetic input generators (seeded numpy randomness allowed: it makes events, not noise)."""

from streamdp.synth.generators import SCENARIOS, Line, example_spec, generate

__all__ = ["SCENARIOS", "Line", "example_spec", "generate"]
