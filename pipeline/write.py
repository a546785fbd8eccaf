"""Writes into topics: `df.write.format("lakelog")` and `df.writeStream.format("lakelog")`.

    df.write.format("lakelog").option("topic", "orders").mode("append").save(root)

Columns (Spark's Kafka sink): `value` (binary or string, required; NULL is a tombstone), `key`
(binary or string), `headers` (array<struct<key string, value binary>>), `partition` (int),
`topic` (string; the `topic` option wins over it), plus `timestamp` (the record's CreateTime;
without it the append time). Every other column is an error, so a typo is not silently dropped.

A `value` (or `key`) of another type, a struct typically, is serialized with the schema of the
topic's subject in the root's registry (`<topic>-value` / `<topic>-key`, its latest version, as
the `topic` option names it), in Confluent's wire format: Kafka consumers with Confluent's
deserializers read it, and the leader stores its fields typed (FORMAT.md §17).

How a record is placed, as the gateway places it: the `partition` column if set, else Kafka's
murmur2 of the key (the partition a Java producer would pick), else round-robin. Each Spark
task collects its records per topic partition and hands them over in chunks of at most
CHUNK_RECORDS records / CHUNK_BYTES bytes:

* to the partition's leader when a live gateway leads it (FORMAT.md §7: every writer commits
  as the leader or hands its change to it), over its internal append route, so the gateway's
  own group commits are never raced;
* else directly to the partition table with the offset compare-and-set (`append_once`).

Either way each chunk's commit carries a Delta txn naming this writer, task and chunk, and a
chunk whose txn the table already holds is skipped. So a retried task, a rerun micro-batch after
a restart from the checkpoint, or a lost answer never duplicates records: exactly-once per
micro-batch as long as a rerun batch hands each task the same rows in the same order (true for
deterministic plans over replayable sources such as lakelog, Kafka or Delta). A batch write is
exactly-once per task attempt; a job that fails and is run again writes again (as Kafka's sink).

Txn app ids are `spark:<queryId>:<task>` for streams and `spark-write:<uuid>:<task>` for batch
writes; each lives in the partition tables it wrote to (a few dozen bytes per task).
"""

from __future__ import annotations

import bisect
import itertools
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from storage_layout import paths, store
from storage_layout.cluster import routes
from storage_layout.cluster.client import NodeSyncClient
from storage_layout.cluster.codec import encode_append
from storage_layout.cluster.errors import NodeCallError
from storage_layout.cluster.nodes import NodeRegistry
from storage_layout.log import DeltaPartitionLog
from storage_layout.log.arrow_records import new_records_table
from storage_layout.meta.catalog import TopicCatalog, TopicInfo
from storage_layout.meta.schemas import SchemaParser, SchemaTable, latest_live
from storage_layout.partitioner import partition_for_key, partitions_for_keys
from storage_layout.records import AppTransaction, NewRecord, RecordColumns
from storage_layout.schemas.json_values import serialize
from storage_layout.schemas.subjects import topic_subject
from storage_layout.schemas.typed_values import typed_codec, typed_columns

# Arrow writers (pyspark 4.0+ for batch writes, 4.1+ for streams) are handed whole record
# batches: placed, checked and grouped with Arrow kernels instead of one Python Row at a time.
try:
    from pyspark.sql.datasource import DataSourceArrowWriter as _BatchWriterBase
except ImportError:  # pragma: no cover (older pyspark: the row writer)
    _BatchWriterBase = DataSourceWriter
try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:  # pragma: no cover
    _StreamWriterBase = DataSourceStreamWriter
BATCH_ARROW = _BatchWriterBase is not DataSourceWriter
STREAM_ARROW = _StreamWriterBase is not DataSourceStreamWriter

CHUNK_RECORDS = 10_000
CHUNK_BYTES = 8 * 1024 * 1024
# A micro-batch's chunk versions are batchId * CHUNKS_PER_BATCH + chunk index: they grow with
# the batch id, so every chunk of a later batch is above every chunk of an earlier one.
CHUNKS_PER_BATCH = 1 << 24
LEADER_TIMEOUT_MS = 60_000
ROUTING_AUTO = "auto"  # through a live leader, else directly
ROUTING_DIRECT = "direct"  # always directly to the table (the gateway catches up)
# Set by Spark's MicroBatchExecution on every task of a micro-batch.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"

_STRINGY = (BinaryType(), StringType())
_HEADERS = ArrayType(
    StructType().add("key", StringType()).add("value", BinaryType())
)  # nullability of the elements is not checked, only the shape
_COLUMN_TYPES: dict[str, tuple[DataType, ...]] = {
    "value": _STRINGY,
    "key": _STRINGY,
    "topic": (StringType(),),
    "partition": (IntegerType(),),
    "headers": (_HEADERS,),
    "timestamp": (TimestampType(),),
}


class WriteError(ValueError):
    """A DataFrame that cannot be written into a topic (the message says what to change)."""


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """What every task needs, pickled from the driver (nothing driver-local)."""

    root: str
    topic: str | None  # the `topic` option; None: the `topic` column decides per row
    routing: str
    columns: tuple[str, ...]
    writer_id: str  # batch writes: unique per write; streams use the query id
    # The driver's explicit storage options, adopted by each task (store.adopt).
    storage_options: tuple[tuple[str, str], ...] = ()
    # The schema ids keys and values of other types than binary/string are serialized with.
    key_schema_id: int | None = None
    value_schema_id: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], schema: StructType, *, overwrite: bool):
        lowered = {str(k).lower(): v for k, v in options.items()}
        if overwrite:
            raise WriteError(
                "Topics are append-only logs: write with mode('append') (the default for "
                "streams); retention and compaction remove records."
            )
        root = lowered.get("path") or lowered.get("root")
        if not root:
            raise WriteError("Give the lakelog storage root: .save(root) or .option('path', root).")
        routing = lowered.get("leaderrouting", ROUTING_AUTO).lower()
        if routing not in (ROUTING_AUTO, ROUTING_DIRECT):
            raise WriteError(f"leaderRouting must be 'auto' or 'direct', not {routing!r}.")
        check_columns(schema, topic_option=lowered.get("topic"))
        root = paths.normalize_root(root)
        return cls(
            root=root,
            topic=lowered.get("topic"),
            routing=routing,
            columns=tuple(schema.fieldNames()),
            writer_id=uuid.uuid4().hex,
            storage_options=tuple(sorted(store.storage_options().items())),
            key_schema_id=_schema_id(schema, "key", root, lowered.get("topic")),
            value_schema_id=_schema_id(schema, "value", root, lowered.get("topic")),
        )


def _schema_id(schema: StructType, column: str, root: str, topic: str | None) -> int | None:
    """The id a `key`/`value` column that is not binary or string is serialized with: the
    latest schema of the topic's subject (None for binary and string columns)."""
    if column not in schema.fieldNames() or schema[column].dataType in _STRINGY:
        return None
    if topic is None:
        raise WriteError(
            f"A '{column}' column of type {schema[column].dataType.simpleString()} is "
            "serialized with the topic's registered schema: name the topic with "
            ".option('topic', name)."
        )
    subject = topic_subject(topic, is_key=column == "key")
    stored = latest_live(SchemaTable(root).view(), subject)
    if stored is None:
        raise WriteError(
            f"Column '{column}' is {schema[column].dataType.simpleString()}, and no schema is "
            f"registered under subject '{subject}' to serialize it with: register one, or "
            "write binary or string."
        )
    return stored.id


def check_columns(schema: StructType, *, topic_option: str | None) -> None:
    """The DataFrame's columns are Spark's Kafka sink columns (+ timestamp), well typed."""
    names = schema.fieldNames()
    unknown = sorted(set(names) - set(_COLUMN_TYPES))
    if unknown:
        raise WriteError(
            f"Columns {unknown} are not written into a topic: give only "
            f"{sorted(_COLUMN_TYPES)} (select or drop the others)."
        )
    if "value" not in names:
        raise WriteError("A 'value' column (binary or string) is required.")
    if topic_option is None and "topic" not in names:
        raise WriteError("Name the topic: .option('topic', name) or a 'topic' column.")
    for field_ in schema.fields:
        allowed = _COLUMN_TYPES[field_.name]
        if field_.name in ("key", "value"):
            continue  # other types are serialized with the topic's schema (_schema_id)
        if not any(_same_shape(field_.dataType, t) for t in allowed):
            wanted = " or ".join(t.simpleString() for t in allowed)
            raise WriteError(
                f"Column '{field_.name}' is {field_.dataType.simpleString()}; it must be "
                f"{wanted} (cast it)."
            )


def _same_shape(actual: DataType, wanted: DataType) -> bool:
    if isinstance(wanted, ArrayType):
        if not isinstance(actual, ArrayType) or not isinstance(actual.elementType, StructType):
            return False
        fields = [(f.name, f.dataType) for f in actual.elementType.fields]
        return fields == [(f.name, f.dataType) for f in wanted.elementType.fields]
    return actual == wanted


# ---- the Spark interfaces ------------------------------------------------------------------


@dataclass
class ChunkCounts(WriterCommitMessage):
    """What one task wrote: records appended and skipped (already written), by partition."""

    appended: dict[tuple[str, int], int] = field(default_factory=dict)
    skipped: dict[tuple[str, int], int] = field(default_factory=dict)


class LakelogWriter(_BatchWriterBase):
    """`df.write.format("lakelog")`: each task appends its rows (see the module doc), handed
    over as Arrow record batches where pyspark can (else as Rows)."""

    def __init__(self, options: WriteOptions) -> None:
        self._options = options

    def write(self, data: Iterator) -> ChunkCounts:
        task = _task_number()
        app_id = f"spark-write:{self._options.writer_id}:{task}"
        write = write_batches if BATCH_ARROW else write_rows
        return write(data, self._options, app_id=app_id, version_base=0, task=task)


class LakelogStreamWriter(_StreamWriterBase):
    """`df.writeStream.format("lakelog")`: like a batch write, with txns per micro-batch so a
    batch rerun after a restart from the checkpoint appends nothing twice."""

    def __init__(self, options: WriteOptions) -> None:
        self._options = options

    def write(self, data: Iterator) -> ChunkCounts:
        context = TaskContext.get()
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
        if query_id is None or batch_id is None:
            raise RuntimeError(
                "No streaming query id / batch id in the task's properties: this Spark "
                "version does not set them, so writes cannot be made idempotent."
            )
        task = context.partitionId()
        write = write_batches if STREAM_ARROW else write_rows
        return write(
            data,
            self._options,
            app_id=f"spark:{query_id}:{task}",
            version_base=int(batch_id) * CHUNKS_PER_BATCH,
            task=task,
        )

    def commit(self, messages, batchId: int) -> None:  # noqa: N803 (Spark's name)
        """Nothing left to do: each task's chunks are committed with their txns."""

    def abort(self, messages, batchId: int) -> None:  # noqa: N803
        """Committed chunks stay; the rerun of this batch skips them by their txns."""


def _task_number() -> int:
    context = TaskContext.get()
    return 0 if context is None else context.partitionId()


# ---- the executor side ---------------------------------------------------------------------


def write_rows(
    rows: Iterable, options: WriteOptions, *, app_id: str, version_base: int, task: int
) -> ChunkCounts:
    """Place each row, buffer per topic partition, hand over full chunks, then the rest."""
    store.adopt(dict(options.storage_options))
    sink = _ChunkSink(options, app_id=app_id, version_base=version_base)
    topics = _Topics(options.root)
    round_robin = itertools.count(task)  # tasks start at different partitions
    for row in rows:
        record, topic_name, explicit = _record_from_row(row, options)
        topic = topics.get(topic_name)
        _check_size(record, topic)
        partition = _place(record.key, explicit, topic, round_robin)
        sink.add(topic, partition, record)
    sink.flush_all()
    return sink.counts


def write_batches(
    batches: Iterable[pa.RecordBatch],
    options: WriteOptions,
    *,
    app_id: str,
    version_base: int,
    task: int,
) -> ChunkCounts:
    """`write_rows` of Arrow record batches, a whole batch at a time: the same placement,
    checks, chunks and txns, with per-record work done by Arrow kernels."""
    store.adopt(dict(options.storage_options))
    sink = _ChunkSink(options, app_id=app_id, version_base=version_base)
    topics = _Topics(options.root)
    round_robin = [task]  # the next round-robin number, as write_rows' counter
    for batch in batches:
        if batch.num_rows:
            _write_batch(batch, options, topics, round_robin, sink)
    sink.flush_all()
    return sink.counts


def _write_batch(
    batch: pa.RecordBatch, options: WriteOptions, topics: _Topics, round_robin: list[int], sink
) -> None:
    columns = dict(zip(batch.schema.names, batch.columns, strict=True))
    key = _binary(columns.get("key"), options.root, options.key_schema_id)
    value = _binary(columns.get("value"), options.root, options.value_schema_id)
    explicit = columns.get("partition")
    sizes = _record_sizes(batch.num_rows, key, value, columns.get("headers"))
    # Round-robin numbers go to keyless rows without a partition, in row order (all topics).
    keyless = pc.is_null(key) if key is not None else pa.repeat(True, batch.num_rows)
    if explicit is not None:
        keyless = pc.and_(keyless, pc.is_null(explicit))
    ranks = pc.subtract(pc.cumulative_sum(pc.cast(keyless, pa.int64())), 1)
    spins = pc.if_else(keyless, pc.add(ranks, round_robin[0]), None)
    round_robin[0] += pc.sum(keyless).as_py() or 0
    for topic_name, rows in _rows_per_topic(batch, columns, options):
        topic = topics.get(topic_name)

        def pick(column, rows=rows):
            return column if column is None or rows is None else column.take(rows)

        topic_sizes = sizes if rows is None else sizes.take(rows)
        _check_sizes(topic_sizes, topic)
        partitions = _place_batch(pick(key), pick(explicit), pick(spins), topic)
        for partition in pc.unique(partitions).to_pylist():
            chosen = pc.indices_nonzero(pc.equal(partitions, partition))
            if rows is not None:
                chosen = rows.take(chosen)
            records = _records_from_columns(chosen, key, value, columns.get("timestamp"), columns)
            sink.add_many(topic, partition, records, sizes.take(chosen).to_pylist())


def _binary(
    column: pa.Array | None, root: str = "", schema_id: int | None = None
) -> pa.Array | None:
    """A key/value column as binary (strings: their utf-8 bytes; other types serialized with
    schema `schema_id` of the root's registry)."""
    if column is None or pa.types.is_binary(column.type):
        return column
    if schema_id is not None:
        parsed = _registered(root, schema_id)
        return pa.array(
            [None if v is None else serialize(parsed, schema_id, v) for v in column.to_pylist()],
            pa.binary(),
        )
    return column.cast(pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary())


_PARSED: dict[tuple[str, int], object] = {}


def _registered(root: str, schema_id: int):
    """Schema `schema_id` of the root's registry, parsed (once per executor process)."""
    key = (root, schema_id)
    if key not in _PARSED:
        view = SchemaTable(root).view()
        stored = view.schema(schema_id)
        if stored is None:
            raise WriteError(f"Schema {schema_id} is not in the registry of {root}.")
        _PARSED[key] = SchemaParser().stored(stored, view)
    return _PARSED[key]


def _record_sizes(count: int, key, value, headers) -> pa.Array:
    """`NewRecord.size_bytes` of every row (int64)."""
    sizes = pa.repeat(pa.scalar(0, pa.int64()), count)
    for column in (key, value):
        if column is not None:
            sizes = pc.add(sizes, pc.fill_null(pc.cast(pc.binary_length(column), pa.int64()), 0))
    if headers is not None and headers.null_count < count:
        entries = headers.values  # every row's headers, back to back (offsets index into them)
        entry_sizes = pc.add(
            pc.fill_null(pc.cast(pc.binary_length(entries.field("key")), pa.int64()), 0),
            pc.fill_null(pc.cast(pc.binary_length(entries.field("value")), pa.int64()), 0),
        )
        running = pa.concat_arrays(
            [pa.array([0], pa.int64()), pc.cumulative_sum(entry_sizes).cast(pa.int64())]
        )
        offsets = headers.offsets
        per_row = pc.subtract(running.take(offsets.slice(1)), running.take(offsets.slice(0, count)))
        sizes = pc.add(sizes, pc.if_else(pc.is_null(headers), 0, per_row))
    return sizes


def _rows_per_topic(batch, columns, options: WriteOptions):
    """(topic, row indices or None for all rows) per topic of the batch."""
    if options.topic:
        return [(options.topic, None)]
    names = columns["topic"]
    if names.null_count or pc.any(pc.equal(names, "")).as_py():
        raise WriteError("A row has no topic: its 'topic' column is NULL and no topic option.")
    unique = pc.unique(names).to_pylist()
    if len(unique) == 1:
        return [(unique[0], None)]
    return [(name, pc.indices_nonzero(pc.equal(names, name))) for name in unique]


def _check_sizes(sizes: pa.Array, topic: TopicInfo) -> None:
    limit = topic.config.max_message_bytes
    too_big = pc.greater(sizes, limit)
    if pc.any(too_big).as_py():
        first = pc.indices_nonzero(too_big)[0].as_py()
        size = sizes[first].as_py()
        raise WriteError(
            f"A record of {size} bytes exceeds max.message.bytes {limit} of topic "
            f"'{topic.name}': split the value or raise the topic's max.message.bytes."
        )


def _place_batch(key, explicit, spins, topic: TopicInfo) -> pa.Array:
    """`_place` of every row: the partition column, else murmur2 of the key, else the row's
    round-robin number modulo the partitions."""
    count = topic.partitions
    choices = []
    if explicit is not None:
        bad = pc.or_(pc.less(explicit, 0), pc.greater_equal(explicit, count))
        if pc.any(bad).as_py():
            wrong = explicit.filter(bad)[0].as_py()
            raise WriteError(
                f"Partition {wrong} does not exist: topic '{topic.name}' has partitions "
                f"0..{count - 1}."
            )
        choices.append(pc.cast(explicit, pa.int64()))
    if key is not None:
        choices.append(pc.cast(partitions_for_keys(key, count), pa.int64()))
    choices.append(pc.remainder(spins, count))
    return pc.coalesce(*choices) if len(choices) > 1 else choices[0]


def _records_from_columns(rows: pa.Array, key, value, timestamp, columns) -> list[NewRecord]:
    """The NewRecords of `rows` (indices into the batch), in row order."""
    count = len(rows)
    nothing = [None] * count
    keys = nothing if key is None else key.take(rows).to_pylist()
    values = nothing if value is None else value.take(rows).to_pylist()
    times = nothing if timestamp is None else _epoch_ms_array(timestamp.take(rows)).to_pylist()
    headers = columns.get("headers")
    if headers is None or headers.null_count == len(headers):
        return [NewRecord(k, v, t) for k, v, t in zip(keys, values, times, strict=True)]
    pairs = [
        tuple((h["key"], h["value"]) for h in hs) if hs else ()
        for hs in headers.take(rows).to_pylist()
    ]
    return [NewRecord(*fields) for fields in zip(keys, values, times, pairs, strict=True)]


_TIME_UNIT_US = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": None}


def _epoch_ms_array(timestamps: pa.Array) -> pa.Array:
    """Epoch milliseconds of a timestamp column (truncated toward zero, as `_epoch_ms`)."""
    raw = pc.cast(timestamps, pa.int64())
    unit = timestamps.type.unit
    if unit == "ns":
        return pc.divide(raw, 1_000_000)
    if unit == "us":
        return pc.divide(raw, 1_000)
    return raw if unit == "ms" else pc.multiply(raw, 1_000)


def _record_from_row(row, options: WriteOptions) -> tuple[NewRecord, str, int | None]:
    get = row.asDict() if hasattr(row, "asDict") else row
    topic = options.topic or get.get("topic")
    if not topic:
        raise WriteError("A row has no topic: its 'topic' column is NULL and no topic option.")
    timestamp = get.get("timestamp")
    record = NewRecord(
        key=_row_bytes(get.get("key"), options.root, options.key_schema_id),
        value=_row_bytes(get.get("value"), options.root, options.value_schema_id),
        timestamp_ms=None if timestamp is None else _epoch_ms(timestamp),
        headers=tuple((h["key"], _as_bytes(h["value"])) for h in get.get("headers") or ()),
    )
    return record, topic, get.get("partition")


def _row_bytes(data, root: str, schema_id: int | None) -> bytes | None:
    if data is None or schema_id is None:
        return _as_bytes(data)
    value = data.asDict(recursive=True) if hasattr(data, "asDict") else data
    return serialize(_registered(root, schema_id), schema_id, value)


def _as_bytes(data) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    return bytes(data)  # bytearray from Spark's row conversion


def _epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _check_size(record: NewRecord, topic: TopicInfo) -> None:
    size = record.size_bytes()
    limit = topic.config.max_message_bytes
    if size > limit:
        raise WriteError(
            f"A record of {size} bytes exceeds max.message.bytes {limit} of topic "
            f"'{topic.name}': split the value or raise the topic's max.message.bytes."
        )


def _place(key: bytes | None, explicit: int | None, topic: TopicInfo, round_robin) -> int:
    if explicit is not None:
        if not 0 <= explicit < topic.partitions:
            raise WriteError(
                f"Partition {explicit} does not exist: topic '{topic.name}' has partitions "
                f"0..{topic.partitions - 1}."
            )
        return explicit
    if key is not None:
        return partition_for_key(key, topic.partitions)
    return next(round_robin) % topic.partitions


class _Topics:
    """The catalog, read once per task and again only for a topic it does not know."""

    def __init__(self, root: str) -> None:
        self._catalog = TopicCatalog(root)
        self._known: dict[str, TopicInfo] = {}

    def get(self, name: str) -> TopicInfo:
        if name not in self._known:
            self._known = self._catalog.topics()
            if name not in self._known:
                self._catalog.topic(name)  # raises TopicNotFound naming it
        return self._known[name]


class _ChunkSink:
    """Buffers records per topic partition; each full buffer is one chunk, one commit."""

    def __init__(self, options: WriteOptions, *, app_id: str, version_base: int) -> None:
        self._options = options
        self._app_id = app_id
        self._version_base = version_base
        self._buffers: dict[tuple[str, int], list[NewRecord]] = {}
        self._sizes: dict[tuple[str, int], int] = {}
        self._chunks: dict[tuple[str, int], int] = {}
        self._topics: dict[str, TopicInfo] = {}
        self._appender = _Appender(options)
        self.counts = ChunkCounts()

    def add(self, topic: TopicInfo, partition: int, record: NewRecord) -> None:
        where = (topic.name, partition)
        self._topics[topic.name] = topic
        buffer = self._buffers.setdefault(where, [])
        buffer.append(record)
        self._sizes[where] = self._sizes.get(where, 0) + record.size_bytes()
        if len(buffer) >= CHUNK_RECORDS or self._sizes[where] >= CHUNK_BYTES:
            self._flush(where)

    def add_many(
        self, topic: TopicInfo, partition: int, records: list[NewRecord], sizes: list[int]
    ) -> None:
        """`add` of each record in turn (`sizes`: their `size_bytes`), a slice at a time:
        the same chunks as adding them one by one."""
        where = (topic.name, partition)
        self._topics[topic.name] = topic
        start = 0
        while start < len(records):
            buffer = self._buffers.setdefault(where, [])
            end = min(len(records), start + CHUNK_RECORDS - len(buffer))
            totals = list(itertools.accumulate(sizes[start:end], initial=self._sizes.get(where, 0)))
            # the first count of records that fills the chunk's bytes (else all of them)
            stop = start + min(bisect.bisect_left(totals, CHUNK_BYTES, lo=1), end - start)
            buffer.extend(records[start:stop])
            self._sizes[where] = totals[stop - start]
            start = stop
            if len(buffer) >= CHUNK_RECORDS or self._sizes[where] >= CHUNK_BYTES:
                self._flush(where)

    def flush_all(self) -> None:
        for where in list(self._buffers):
            self._flush(where)
        self._appender.close()

    def _flush(self, where: tuple[str, int]) -> None:
        records = self._buffers.pop(where, [])
        self._sizes.pop(where, None)
        if not records:
            return
        chunk = self._chunks.get(where, 0)
        self._chunks[where] = chunk + 1
        if chunk >= CHUNKS_PER_BATCH:
            raise WriteError("A task wrote more chunks to one partition than a batch allows.")
        txn = AppTransaction(self._app_id, self._version_base + chunk)
        topic, partition = where
        appended = self._appender.append(self._topics[topic], partition, records, txn)
        counts = self.counts.appended if appended else self.counts.skipped
        counts[where] = counts.get(where, 0) + len(records)


class _Appender:
    """Hands a chunk to the partition's live leader, else appends it to the table."""

    def __init__(self, options: WriteOptions) -> None:
        self._options = options
        self._logs: dict[tuple[str, int], DeltaPartitionLog] = {}
        self._leader_client: NodeSyncClient | None = None
        self._node_urls: dict[int, str] | None = None

    def append(
        self, topic: TopicInfo, partition: int, records: list[NewRecord], txn: AppTransaction
    ) -> bool:
        """True if appended, False if the table already held `txn`."""
        log = self._log(topic.name, partition)
        if self._options.routing == ROUTING_AUTO:
            handed = self._through_leader(log, topic.name, partition, records, txn)
            if handed is not None:
                return handed
        typed = self._typed(records)
        return log.append_once(typed, config=topic.config, transaction=txn) is not None

    def _typed(self, records: list[NewRecord]):
        """Records this writer serialized with a schema, with their typed columns (the
        leader would decode them the same way: FORMAT.md §17)."""
        options = self._options
        typed: dict[str, pa.Array] = {}
        for schema_id, is_key in ((options.key_schema_id, True), (options.value_schema_id, False)):
            if schema_id is not None:
                codec = typed_codec(_registered(options.root, schema_id), (0,))
                payloads = [r.key if is_key else r.value for r in records]
                typed.update(typed_columns(payloads, schema_id, codec, is_key=is_key))
        if not typed:
            return records
        table = new_records_table(records)
        return RecordColumns(table, sum(r.size_bytes() for r in records), pa.table(typed))

    def close(self) -> None:
        if self._leader_client is not None:
            self._leader_client.close()

    def _log(self, topic: str, partition: int) -> DeltaPartitionLog:
        where = (topic, partition)
        if where not in self._logs:
            uri = paths.partition_table_uri(self._options.root, topic, partition)
            self._logs[where] = DeltaPartitionLog.open(uri)
        return self._logs[where]

    def _through_leader(self, log, topic, partition, records, txn) -> bool | None:
        """The leader's verdict, or None when no live leader took the chunk (append
        directly: the offset CAS keeps that safe, and the leader catches up)."""
        leader = log.leader()
        url = None if leader is None else self._urls().get(leader.node_id)
        if url is None:
            return None
        if self._leader_client is None:
            self._leader_client = NodeSyncClient(timeout_ms=LEADER_TIMEOUT_MS)
        body = encode_append(records, transaction=txn)
        try:
            answer = self._leader_client.post_json(url, routes.append_path(topic, partition), body)
        except NodeCallError:
            return None  # no node there any more, not the leader (any more), or shutting down
        return not answer["duplicate"]

    def _urls(self) -> dict[int, str]:
        if self._node_urls is None:
            records = NodeRegistry(self._options.root).read_all()
            self._node_urls = {node_id: record.url for node_id, record in records.items()}
        return self._node_urls
