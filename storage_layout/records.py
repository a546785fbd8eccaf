"""Value types that cross the storage boundary."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A record to append. `timestamp_ms` is the producer's CreateTime; None means 'now'."""

    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None
    headers: tuple[Header, ...] = ()

    def size_bytes(self) -> int:
        """Bytes this record adds to a batch, as Kafka counts them for max.message.bytes."""
        size = len(self.key or b"") + len(self.value or b"")
        for name, value in self.headers:
            size += len(name.encode()) + len(value or b"")
        return size


@dataclass(frozen=True, slots=True)
class AppTransaction:
    """A writer's idempotence marker, committed atomically with its records as a Delta `txn`
    action (as Delta's own streaming sink commits (queryId, batchId)): once the partition
    table holds `app_id` at `version` or above, a retry of that write is a duplicate."""

    app_id: str
    version: int


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Offsets [base_offset, last_offset] were committed in Delta version `table_version`."""

    base_offset: int
    last_offset: int
    append_time_ms: int
    table_version: int
    segment: int


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Records (Arrow columns offset, timestamp, timestamp_type, key, value, headers) and bounds."""

    records: pa.Table
    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class PartitionBounds:
    """log_start_offset <= high_watermark; the partition holds offsets in between."""

    log_start_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """One partition of one topic (ordered by topic, then partition)."""

    topic: str
    partition: int
