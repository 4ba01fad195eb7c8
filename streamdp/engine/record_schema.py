"""What every output record says about itself: its schema version and its kind."""

from __future__ import annotations

from typing import Literal

#: 2: one vocabulary (issue 14): the contribution bound is ``sensitivity`` (was ``delta``) and
#: the dead-letter reason ``contribution_over_sensitivity`` (was ``contribution_over_delta``);
#: see docs/consuming.md, "Migrating from schema_version 1".
SCHEMA_VERSION = 2

#: What a record is; its ``"kind"`` field, and what sinks route by (:mod:`streamdp.engine.sinks`).
RecordKind = Literal["release", "consistent", "dead_letter"]
