"""Cluster-wide defaults for topic configs (Kafka's `log.retention.ms` and friends), stored in
the root as `_meta/topic_defaults.json` so that every process reading the catalog (gateways,
maintenance jobs, Spark) resolves a topic's configuration the same way: its own overrides, then
these, then Kafka's defaults. Gateways write the ones set in their environment
(`LAKELOG_DEFAULT_RETENTION_MS`, ...) at start."""

from __future__ import annotations

import json
from collections.abc import Mapping

from storage_layout import paths
from storage_layout.store import open_store
from storage_layout.topic_config import normalized

DEFAULTS_PATH = "_meta/topic_defaults.json"


def read_topic_defaults(root: str) -> dict[str, str]:
    """The stored defaults ({} when none were ever set).

    Raises:
        OSError: the store could not be read.
    """
    data = open_store(paths.normalize_root(root)).get(DEFAULTS_PATH)
    return {} if data is None else dict(json.loads(data))


def write_topic_defaults(root: str, defaults: Mapping[str, object]) -> dict[str, str]:
    """Validate and store `defaults` (replacing what was stored); returns them normalized.

    Raises:
        InvalidConfig: an unknown name or a bad value.
    """
    values = normalized(defaults)
    payload = json.dumps(values, sort_keys=True).encode()
    open_store(paths.normalize_root(root)).put(DEFAULTS_PATH, payload)
    return values
