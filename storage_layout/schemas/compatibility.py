"""Compatibility levels, as Confluent's registry names and applies them: which earlier
versions a new schema is checked against, and in which direction."""

from __future__ import annotations

from collections.abc import Sequence

from storage_layout.schemas.model import ParsedSchema

BACKWARD = "BACKWARD"
NONE = "NONE"
LEVELS = (
    BACKWARD,
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
    NONE,
)
DEFAULT_LEVEL = BACKWARD


def incompatibilities(
    level: str, new: ParsedSchema, previous: Sequence[tuple[int, ParsedSchema]]
) -> list[str]:
    """Why `new` may not follow the subject's `previous` (version, schema) pairs, oldest
    first, under `level` (empty: it may). BACKWARD: the new schema reads data written with
    the latest; FORWARD: the latest reads the new schema's; FULL: both; *_TRANSITIVE: against
    every earlier version, not only the latest; NONE: no check."""
    if level == NONE or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    direction = level.removesuffix("_TRANSITIVE")
    messages = []
    for version, old in against:
        if direction in ("BACKWARD", "FULL"):
            messages.extend(_labelled("BACKWARD", version, new.read_errors(old)))
        if direction in ("FORWARD", "FULL"):
            messages.extend(_labelled("FORWARD", version, old.read_errors(new)))
    return messages


def _labelled(direction: str, version: int, errors: list[str]) -> list[str]:
    return [f"{direction} check against version {version}: {error}" for error in errors]
