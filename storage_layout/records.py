"""Value types that cross the storage boundary."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from storage_layout.schema import RECORD_COLUMNS, TRANSACTIONAL_RECORD_COLUMNS

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
class NamedSchemas:
    """The registered schemas a batch's keys and values may name by Confluent's wire-format
    prefix (FORMAT.md §17), as a decoder saw them: the distinct ids (None: too many to list)."""

    key_ids: frozenset[int] | None
    value_ids: frozenset[int] | None

    def ids(self, *, is_key: bool) -> frozenset[int] | None:
        return self.key_ids if is_key else self.value_ids


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """Records to append as Arrow columns (schema.NEW_RECORDS_SCHEMA), as a Kafka batch is
    decoded: no Python object per record on the produce path. `size_bytes` counts as
    NewRecord.size_bytes does."""

    table: pa.Table
    size_bytes: int
    # The typed columns of keys and values that carry a registered schema's id (FORMAT.md
    # §17), one row per record; None when no record has any.
    typed: pa.Table | None = None
    # The codec each record's Kafka batch was compressed with (int8, FORMAT.md §18), one per
    # record; None when none was.
    compression: pa.Array | None = None
    # What the decoder saw of the schemas the records may name; None: it did not look.
    named: NamedSchemas | None = None

    def __len__(self) -> int:
        return self.table.num_rows

    @property
    def may_name_schemas(self) -> bool:
        """False only when the decoder saw that no key or value starts with Confluent's
        wire-format prefix and no record has headers (a header may name a schema too)."""
        named = self.named
        if named is None or self.table.column("headers").null_count < len(self):
            return True
        return named.key_ids != frozenset() or named.value_ids != frozenset()

    def to_records(self) -> list[NewRecord]:
        """Record by record, for the paths that need objects (forwarding, JSON). Not
        iterable on purpose: the hot path must never make an object per record by accident."""
        columns = self.table.to_pydict()
        return [
            NewRecord(
                key, value, timestamp_ms, tuple((h["key"], h["value"]) for h in headers or ())
            )
            for timestamp_ms, key, value, headers in zip(
                columns["timestamp_ms"],
                columns["key"],
                columns["value"],
                columns["headers"],
                strict=True,
            )
        ]


# What an append takes: records one by one, or a decoded batch's columns.
Records = Sequence[NewRecord] | RecordColumns


def as_record_list(records: Records) -> Sequence[NewRecord]:
    return records.to_records() if isinstance(records, RecordColumns) else records


def keyless_indexes(records: Records) -> list[int]:
    """The indexes of the records without a key, in order."""
    if isinstance(records, RecordColumns):
        keys = records.table.column("key")
        if keys.null_count == 0:
            return []
        return pc.indices_nonzero(keys.is_null()).to_pylist()
    return [i for i, record in enumerate(records) if record.key is None]


def records_size_bytes(records: Records) -> int:
    if isinstance(records, RecordColumns):
        return records.size_bytes
    return sum(record.size_bytes() for record in records)


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


class Isolation(enum.Enum):
    """How a read treats transactions (FORMAT.md §14)."""

    # Data records only, markers left out (readers that know nothing of transactions yet).
    PLAIN = "plain"
    # Every row, markers included, with the transaction columns (a Kafka read_uncommitted
    # fetch, which frames markers as control batches).
    UNCOMMITTED = "read_uncommitted"
    # As UNCOMMITTED, below the last stable offset, with the aborted transactions of the range
    # (a Kafka read_committed fetch: the client skips the aborted records).
    COMMITTED = "read_committed"
    # Committed data records only, below the last stable offset: aborted records and markers
    # left out here (HTTP consumers and Spark with isolation.level=read_committed).
    COMMITTED_DATA = "committed_data"

    @property
    def columns(self) -> tuple[str, ...]:
        if self in (Isolation.PLAIN, Isolation.COMMITTED_DATA):
            return RECORD_COLUMNS
        return TRANSACTIONAL_RECORD_COLUMNS

    @property
    def needs_index(self) -> bool:
        return self in (Isolation.COMMITTED, Isolation.COMMITTED_DATA)

    @classmethod
    def for_data_readers(cls, isolation_level: str) -> Isolation:
        """PLAIN or COMMITTED_DATA for Kafka's `isolation.level` setting (any case, spaces
        around it ignored, as every front-end takes it).

        Raises:
            ValueError: the value is neither read_uncommitted nor read_committed.
        """
        isolation_level = isolation_level.strip().lower()
        if isolation_level == cls.UNCOMMITTED.value:
            return cls.PLAIN
        if isolation_level == cls.COMMITTED.value:
            return cls.COMMITTED_DATA
        raise ValueError(
            f"isolation.level '{isolation_level}' is not one of Kafka's: use read_uncommitted "
            f"(the default) or read_committed."
        )


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Records (Arrow columns of `Isolation.columns`) and bounds. `last_stable_offset` and
    `aborted` (AbortedTransaction entries of the range read) are set by COMMITTED reads.

    `next_offset` is where the next read goes on: past the last row read, even when the read
    left that row out (a marker, an aborted record), so a reader never stalls on rows it
    cannot see. None: nothing was read (reads resume at the same offset)."""

    records: pa.Table
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int | None = None
    aborted: tuple = ()
    next_offset: int | None = None
    # The txns of the version read (a reference, not a copy): its leader epochs are derived
    # from them by the readers that need them (leadership.current_epoch, LeaderEpochs).
    transactions: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionBounds:
    """log_start_offset <= high_watermark; the partition holds offsets in between. Where
    asked for, `last_stable_offset`: the first offset of the oldest open transaction, else the
    high watermark (read_committed readers end there)."""

    log_start_offset: int
    high_watermark: int
    last_stable_offset: int | None = None

    def end_offset(self, isolation: Isolation) -> int:
        """Where a reader of `isolation` ends: the last stable offset for committed reads."""
        if isolation.needs_index and self.last_stable_offset is not None:
            return self.last_stable_offset
        return self.high_watermark


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """One partition of one topic (ordered by topic, then partition)."""

    topic: str
    partition: int
