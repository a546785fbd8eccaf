"""The topic catalog: `_meta/topics`, a Delta table with one row per topic version.

The current state of a topic is its row with the highest `version`. Every change commits a
`txn` action `Transaction("topic/<name>", version)` on the snapshot it was decided on, so two
nodes changing the same topic at once cannot both win (the same CAS as offsets, FORMAT.md).

Concurrency contract: methods are safe to call from several threads of one process (a lock
serializes writers); several processes and nodes are serialized by the CAS.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from storage_layout import paths
from storage_layout.errors import (
    InvalidPartitions,
    PartitionNotFound,
    StorageUnavailable,
    TopicExists,
    TopicNotFound,
)
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.table import MetaTable, Verdict
from storage_layout.meta.topic_defaults import read_topic_defaults
from storage_layout.schema import TIMESTAMP_TYPE
from storage_layout.store import open_store
from storage_layout.topic_config import (
    TopicConfig,
    normalized,
    overrides_of,
    resolved,
    validate_topic_name,
)

TOPICS_TABLE = "topics"
PARTITIONS_MAX = 10_000
STATE_ACTIVE = "active"
STATE_DELETED = "deleted"

CATALOG_SCHEMA = pa.schema(
    [
        pa.field("name", pa.string(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("topic_id", pa.string(), nullable=False),
        pa.field("partitions", pa.int32(), nullable=False),
        pa.field("config", pa.string(), nullable=False),
        pa.field("state", pa.string(), nullable=False),
        pa.field("updated_at", TIMESTAMP_TYPE, nullable=False),
    ]
)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One version of a topic: its partition count and configuration."""

    name: str
    topic_id: str
    version: int
    partitions: int
    config: TopicConfig  # resolved: overrides, then cluster defaults, then Kafka's
    state: str = STATE_ACTIVE
    # The configs set on the topic itself (Kafka names, as strings) and the cluster-wide
    # defaults in force when it was read: what the admin APIs report as sources.
    overrides: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, str] = field(default_factory=dict)

    def check_partition(self, partition: int) -> None:
        if not 0 <= partition < self.partitions:
            raise PartitionNotFound(self.name, partition, self.partitions)


class TopicCatalog:
    """Reads and changes `<root>/_meta/topics`; creates and deletes the partition tables."""

    def __init__(self, root: str) -> None:
        self.root = paths.normalize_root(root)
        self._uri = paths.meta_table_uri(self.root, TOPICS_TABLE)
        self._lock = threading.Lock()
        self._table = MetaTable(self._uri, CATALOG_SCHEMA)
        self._cached_version = -1
        self._cached: dict[str, TopicInfo] = {}

    # ---- reads -----------------------------------------------------------------------------

    def topics(self) -> dict[str, TopicInfo]:
        """Active topics by name, as of the latest catalog version, resolved with the
        cluster-wide defaults stored now (one more small read)."""
        defaults = self._defaults()
        with self._lock:
            latest = self._latest()
        return {
            name: _resolved(topic, defaults)
            for name, topic in latest.items()
            if topic.state == STATE_ACTIVE
        }

    def _defaults(self) -> dict[str, str]:
        try:
            return read_topic_defaults(self.root)
        except OSError as error:
            raise StorageUnavailable(f"Cannot read the topic defaults: {error}") from error

    def topic(self, name: str) -> TopicInfo:
        topic = self.topics().get(name)
        if topic is None:
            raise TopicNotFound(name)
        return topic

    def _latest(self) -> dict[str, TopicInfo]:
        """The latest row per topic; re-read only when the catalog has a new version."""
        self._table.refresh()
        if self._table.version == self._cached_version:
            return self._cached
        version = self._table.version
        rows = self._table.read().to_pylist()
        self._cached, self._cached_version = _latest_rows(rows), version
        return self._cached

    # ---- changes ---------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int,
        config: TopicConfig | None = None,
        *,
        overrides: Mapping[str, object] | None = None,
    ) -> TopicInfo:
        """Create the topic and its empty partition tables. Its configuration is `overrides`
        (Kafka names), or the settings of `config` that differ from Kafka's defaults.

        Raises:
            InvalidTopic, InvalidPartitions: bad name or partition count.
            TopicExists: an active topic has this name (also when another node wins the race).
        """
        validate_topic_name(name)
        check_partition_count(partitions)
        with self._lock:
            previous = self._latest().get(name)
            if previous is not None and previous.state == STATE_ACTIVE:
                raise TopicExists(name)
            version = previous.version + 1 if previous else 1
            own = _overrides(config, overrides)
            topic = TopicInfo(
                name, uuid.uuid4().hex, version, partitions, TopicConfig(), overrides=own
            )
            self._commit(topic, on_conflict=TopicExists(name))
        # Leftovers of an earlier topic with this name are garbage once the catalog says so.
        _remove_tree(paths.topic_dir(self.root, name))
        self._create_tables(name, range(partitions))
        return _resolved(topic, self._defaults())

    def alter_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        config: TopicConfig | None = None,
        overrides: Mapping[str, object] | None = None,
    ) -> TopicInfo:
        """Add partitions (never remove: Kafka's rule) and/or replace the configuration (the
        topic's own settings: `overrides`, or those of `config` that differ from Kafka's)."""
        changes_config = config is not None or overrides is not None
        with self._lock:
            current = self._latest().get(name)
            if current is None or current.state != STATE_ACTIVE:
                raise TopicNotFound(name)
            new_count = current.partitions if partitions is None else partitions
            check_partition_count(new_count)
            if new_count < current.partitions or (
                partitions == current.partitions and not changes_config
            ):
                raise InvalidPartitions(
                    f"Topic '{name}' already has {current.partitions} partitions; the count can "
                    f"only grow (requested {new_count})."
                )
            self._create_tables(name, range(current.partitions, new_count))
            own = _overrides(config, overrides) if changes_config else current.overrides
            topic = TopicInfo(
                name, current.topic_id, current.version + 1, new_count, TopicConfig(), overrides=own
            )
            self._commit(topic, on_conflict=TopicNotFound(name))
        return _resolved(topic, self._defaults())

    def delete_topic(self, name: str) -> TopicInfo:
        """Mark the topic deleted, then remove its tables."""
        with self._lock:
            current = self._latest().get(name)
            if current is None or current.state != STATE_ACTIVE:
                raise TopicNotFound(name)
            deleted = TopicInfo(
                name,
                current.topic_id,
                current.version + 1,
                current.partitions,
                current.config,
                STATE_DELETED,
                overrides=current.overrides,
            )
            self._commit(deleted, on_conflict=TopicNotFound(name))
        _remove_tree(paths.topic_dir(self.root, name))
        return deleted

    def _create_tables(self, name: str, partitions) -> None:
        for partition in partitions:
            DeltaPartitionLog.create(paths.partition_table_uri(self.root, name, partition))

    def _commit(self, topic: TopicInfo, *, on_conflict: Exception) -> None:
        transaction = (f"topic/{topic.name}", topic.version)
        verdict = self._table.append(_topic_to_row(topic), [transaction])
        if verdict is Verdict.TXN_CONFLICT:
            raise on_conflict
        if verdict is Verdict.RACE:
            raise StorageUnavailable(
                "The topic catalog changed underneath this change (its metadata or files); "
                "nothing was written: retry."
            )


def check_partition_count(partitions: int) -> None:
    if not 1 <= partitions <= PARTITIONS_MAX:
        raise InvalidPartitions(
            f"Invalid partition count {partitions}: use 1 to {PARTITIONS_MAX} partitions."
        )


def _topic_to_row(topic: TopicInfo) -> pa.Table:
    row = {
        "name": [topic.name],
        "version": [topic.version],
        "topic_id": [topic.topic_id],
        "partitions": [topic.partitions],
        "config": [json.dumps({"overrides": dict(topic.overrides)}, sort_keys=True)],
        "state": [topic.state],
        "updated_at": [int(time.time() * 1_000_000)],
    }
    return pa.table(row, schema=CATALOG_SCHEMA)


def _row_to_topic(row: dict) -> TopicInfo:
    """A catalog row; its `config` is `{"overrides": {...}}`, the topic's own settings (rows
    written before cluster-wide defaults hold every setting, flat: those equal to Kafka's
    defaults count as unset)."""
    stored = json.loads(row["config"])
    if "overrides" in stored:
        overrides = dict(stored["overrides"])
    else:
        overrides = overrides_of(TopicConfig.from_mapping(stored))
    return TopicInfo(
        row["name"],
        row["topic_id"],
        row["version"],
        row["partitions"],
        TopicConfig(),
        row["state"],
        overrides=overrides,
    )


def _resolved(topic: TopicInfo, defaults: Mapping[str, str]) -> TopicInfo:
    config = resolved(topic.overrides, defaults)
    return dataclasses.replace(topic, config=config, defaults=dict(defaults))


def _overrides(config: TopicConfig | None, overrides: Mapping[str, object] | None):
    if overrides is not None:
        return normalized(overrides)
    return overrides_of(config or TopicConfig())


def _latest_rows(rows: list[dict]) -> dict[str, TopicInfo]:
    latest: dict[str, TopicInfo] = {}
    for row in rows:
        current = latest.get(row["name"])
        if current is None or row["version"] > current.version:
            latest[row["name"]] = _row_to_topic(row)
    return latest


def _remove_tree(uri: str) -> None:
    """Delete a (deleted or replaced) topic's tables; missing is fine."""
    try:
        open_store(uri).delete_tree()
    except OSError as error:
        raise StorageUnavailable(f"Cannot delete {uri}: {error}") from error
