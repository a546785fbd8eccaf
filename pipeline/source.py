"""`spark.read.format("lakelog")`: a Python Data Source with the options of Spark's Kafka source.

    register_data_source(spark)
    spark.read.format("lakelog").option("subscribe", "orders").load("/data/lakelog")

Options (Spark's Kafka source names): exactly one of `subscribe` (comma-separated topics),
`subscribePattern` (a Java-style regex over topic names) and `assign` (JSON
`{"orders": [0, 1]}`); `startingOffsets` and `endingOffsets` ("earliest", "latest", or JSON
`{"orders": {"0": 23, "1": -2}}`, -2 earliest, -1 latest, ending exclusive); `includeHeaders`;
`startingTimestamp` / `startingOffsetsByTimestamp` and `endingTimestamp` /
`endingOffsetsByTimestamp` (epoch ms, taking precedence over the offsets options);
`failOnDataLoss` (default true: a starting offset below a partition's log_start_offset is an
error; false: read from log_start_offset); `kafka.isolation.level` (read_uncommitted, the
default: every data record; read_committed: records of aborted transactions left out, and
"latest" is the last stable offset, so an open transaction's records wait until it ends); the
storage root as `path` (or `.load(root)`). Transaction markers are never rows.
The schema is exactly Spark's Kafka source schema. `spark.readStream.format("lakelog")` reads
topics as streams with the same options and planning (pipeline/stream.py).

How it reads: the driver resolves each topic partition's offset range and the Parquet files that
hold it from the partition's Delta log (one snapshot each, so the read is repeatable), and cuts
the files into input partitions of about RECORDS_PER_SPLIT records; executors read just those
files with pyarrow (no Delta log replay, no copy) and keep the offsets in range. Executors need
the `lakelog` wheel and `deltalake`/`pyarrow` installed (on Databricks: the bundle's libraries).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from pipeline.read import EARLIEST, LATEST, kafka_schema, parse_offsets, resolve_range
from storage_layout import paths, store
from storage_layout.catalog import TopicCatalog
from storage_layout.log import DeltaPartitionLog, LogSnapshot
from storage_layout.log.arrow_records import PLAIN_READ_COLUMNS, PLAIN_READ_SCHEMA
from storage_layout.log.transaction_index import (
    AbortedTransaction,
    TransactionIndex,
    aborted_mask,
)
from storage_layout.records import Isolation
from storage_layout.schema import FILE_SCHEMA

SOURCE_NAME = "lakelog"
RECORDS_PER_SPLIT = 1_000_000
_TOPIC_OPTIONS = ("subscribe", "subscribePattern", "assign")


def register_data_source(spark: SparkSession) -> None:
    """Make `format("lakelog")` available in this Spark session (idempotent)."""
    try:
        spark.dataSource.register(LakelogDataSource)
    except AnalysisException as error:
        # Spark 4.0 refuses to register a name twice, including over the registration it
        # made itself from the installed `pyspark_lakelog` module; 4.1+ replaces it.
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(error):
            raise


@dataclass(frozen=True, slots=True)
class FileSlice:
    """One Parquet file of a partition table (relative path) and the offsets wanted from it."""

    path: str
    start: int  # inclusive
    end: int  # exclusive


@dataclass(frozen=True)
class OffsetSplit(InputPartition):
    """Records [start, end) of one topic partition, in `files` of the table at `table_uri`."""

    topic: str
    partition: int
    table_uri: str
    files: tuple[FileSlice, ...]
    # The driver's explicit storage options (credentials from variables reach executors
    # through their environment; these would not).
    storage_options: tuple[tuple[str, str], ...] = ()
    # read_committed: the aborted transactions with records in this split, which executors
    # leave out (the driver knows them from the partition's transaction index).
    aborted: tuple[AbortedTransaction, ...] = ()


STORAGE_OPTIONS = "storageOptions"


class LakelogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return kafka_schema(include_headers=_flag(self.options, "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        adopt_storage_options(self.options)
        return LakelogBatchReader(_lowercase(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        # Imported here: pipeline.stream builds on this module's planning and reading helpers.
        from pipeline.stream import LakelogStreamReader

        adopt_storage_options(self.options)
        return LakelogStreamReader(_lowercase(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pipeline.write import LakelogWriter, WriteOptions

        adopt_storage_options(self.options)
        return LakelogWriter(WriteOptions.parse(self.options, schema, overwrite=overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pipeline.write import LakelogStreamWriter, WriteOptions

        adopt_storage_options(self.options)
        return LakelogStreamWriter(WriteOptions.parse(self.options, schema, overwrite=overwrite))


class LakelogBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self._committed = isolation_of(options).needs_index
        self._options = _lowercase(options)
        self._include_headers = _flag(options, "includeHeaders", False)

    def partitions(self) -> list[OffsetSplit]:
        root = _root(self._options)
        catalog = TopicCatalog(root)
        splits: list[OffsetSplit] = []
        for topic, partitions in _topic_partitions(self._options, catalog).items():
            starts = _offsets(self._options, "startingOffsets", topic, partitions, ending=False)
            ends = _offsets(self._options, "endingOffsets", topic, partitions, ending=True)
            for partition in sorted(partitions):
                uri = paths.partition_table_uri(root, topic, partition)
                log = DeltaPartitionLog.open(uri)
                start, end = _by_timestamp(
                    self._options,
                    log,
                    topic,
                    partition,
                    start=starts.get(partition, EARLIEST),
                    end=ends.get(partition, LATEST),
                )
                splits += _partition_splits(
                    log,
                    topic=topic,
                    partition=partition,
                    table_uri=uri,
                    start=start,
                    end=end,
                    fail_on_data_loss=_flag(self._options, "failOnDataLoss", True),
                    committed=self._committed,
                )
        return splits

    def read(self, partition: OffsetSplit) -> Iterator[pa.RecordBatch]:
        return read_split(partition, include_headers=self._include_headers)


# ---- planning (driver) ---------------------------------------------------------------------------


def adopt_storage_options(options: Mapping[str, str]) -> None:
    """Take the `storageOptions` option (a JSON object of storage options, as
    LAKELOG_STORAGE_OPTIONS) in this process. Spark plans a Python data source in a worker
    process, not the driver's, so explicit options travel as a data source option; the splits
    and write tasks carry them on to the executors."""
    text = _opt(options, STORAGE_OPTIONS)
    if not text:
        return
    try:
        parsed = json.loads(text)
    except ValueError as error:
        raise ValueError(f"Option {STORAGE_OPTIONS} must be a JSON object: {error}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"Option {STORAGE_OPTIONS} must be a JSON object of strings.")
    store.adopt({str(k): str(v) for k, v in parsed.items()})


def storage_options_option() -> dict[str, str]:
    """This process's explicit storage options as data source options (empty when none), for
    the helpers that build `format("lakelog")` reads and writes on the driver."""
    options = store.storage_options()
    return {STORAGE_OPTIONS: json.dumps(options, sort_keys=True)} if options else {}


ISOLATION_OPTION = "kafka.isolation.level"


def isolation_of(options: Mapping[str, str]) -> Isolation:
    """Spark's Kafka source option: read_uncommitted (its default: every data record) or
    read_committed (PLAIN or COMMITTED_DATA); markers are left out either way."""
    level = _opt(options, ISOLATION_OPTION) or "read_uncommitted"
    try:
        return Isolation.for_data_readers(level)
    except ValueError:
        raise ValueError(
            f"{ISOLATION_OPTION} must be read_uncommitted or read_committed, not {level!r}."
        ) from None


def _root(options: Mapping[str, str]) -> str:
    root = _opt(options, "path") or _opt(options, "root")
    if not root:
        raise ValueError("Give the lakelog storage root: .load(root) or .option('path', root).")
    return paths.normalize_root(root)


def _topic_partitions(options: Mapping[str, str], catalog: TopicCatalog) -> dict[str, set[int]]:
    given = [name for name in _TOPIC_OPTIONS if _opt(options, name)]
    if len(given) != 1:
        raise ValueError(
            "Exactly one of 'subscribe', 'subscribePattern' and 'assign' must be given, as for "
            f"Spark's Kafka source (got {given or 'none'})."
        )
    if "assign" in given:
        return _assigned(_opt(options, "assign"), catalog)
    topics = catalog.topics()
    if "subscribe" in given:
        names = [t.strip() for t in _opt(options, "subscribe").split(",") if t.strip()]
        for name in names:
            catalog.topic(name)  # TopicNotFound names it
    else:
        pattern = re.compile(_opt(options, "subscribePattern"))
        names = sorted(t for t in topics if pattern.fullmatch(t))
    return {name: set(range(topics[name].partitions)) for name in names}


def _assigned(spec: str, catalog: TopicCatalog) -> dict[str, set[int]]:
    try:
        assigned = json.loads(spec)
    except json.JSONDecodeError as error:
        raise ValueError(f'assign must be JSON like {{"orders": [0, 1]}}: {error}') from None
    if not isinstance(assigned, dict):
        raise ValueError('assign must be JSON like {"orders": [0, 1]}.')
    result = {}
    for topic, partitions in assigned.items():
        info = catalog.topic(topic)
        for partition in partitions:
            info.check_partition(partition)
        result[topic] = set(partitions)
    return result


def _offsets(options, name: str, topic: str, partitions: set[int], *, ending: bool):
    spec = _opt(options, name) or ("latest" if ending else "earliest")
    if spec.strip() not in ("earliest", "latest"):
        by_topic = json.loads(spec)
        spec = {topic: by_topic[topic]} if topic in by_topic else "latest" if ending else "earliest"
    offsets = parse_offsets(spec, topic=topic, partitions=max(partitions) + 1, ending=ending)
    return {p: o for p, o in offsets.items() if p in partitions}


def _by_timestamp(options, log: DeltaPartitionLog, topic: str, partition: int, *, start, end):
    """Spark's timestamp options, which take precedence over the offsets options:
    `startingTimestamp` (all partitions), else `startingOffsetsByTimestamp` (JSON, per
    partition); `endingTimestamp`, else `endingOffsetsByTimestamp`. A start with no record at or
    after its timestamp is an error (Spark's default strategy); such an end is the latest."""
    start_ms = _timestamp_option(
        options, "startingTimestamp", "startingOffsetsByTimestamp", topic, partition
    )
    if start_ms is not None:
        start = log.offset_for_timestamp(start_ms)
        if start is None:
            raise ValueError(
                f"No record of {topic}-{partition} has a timestamp at or after {start_ms} "
                f"(startingTimestamp / startingOffsetsByTimestamp)."
            )
    end_ms = _timestamp_option(
        options, "endingTimestamp", "endingOffsetsByTimestamp", topic, partition
    )
    if end_ms is not None:
        found = log.offset_for_timestamp(end_ms)
        end = LATEST if found is None else found
    return start, end


def _timestamp_option(options, global_name: str, json_name: str, topic: str, partition: int):
    if _opt(options, global_name):
        return int(_opt(options, global_name))
    spec = _opt(options, json_name)
    if not spec:
        return None
    value = json.loads(spec).get(topic, {}).get(str(partition))
    return None if value is None else int(value)


def _partition_splits(
    log: DeltaPartitionLog,
    *,
    topic: str,
    partition: int,
    table_uri: str,
    start: int,
    end: int,
    fail_on_data_loss: bool,
    committed: bool,
) -> list[OffsetSplit]:
    low = log.snapshot.log_start_offset
    if 0 <= start < low:
        if fail_on_data_loss:
            raise ValueError(
                f"startingOffsets for {topic}-{partition} is {start}, below log_start_offset "
                f"{low}: those records were deleted by retention. Set failOnDataLoss=false to "
                f"start at {low}."
            )
        start = low
    snapshot = log.snapshot
    transactions = None
    if committed:
        transactions = log.transaction_index(snapshot)
        stable = log.last_stable_offset(snapshot)
        if end == LATEST or end > stable:  # past it: records of a transaction still open
            # ...but never before the start: a start past the last stable offset reads
            # nothing yet (not an error, as Spark's Kafka source waits there).
            end = max(stable, snapshot.log_start_offset if start == EARLIEST else start)
    wanted = resolve_range(log, partition=partition, start=start, end=end, topic=topic)
    return plan_splits(
        snapshot,
        topic=topic,
        partition=partition,
        table_uri=table_uri,
        first=wanted.start,
        last=wanted.end,
        transactions=transactions,
    )


def plan_splits(
    snapshot: LogSnapshot,
    *,
    topic: str,
    partition: int,
    table_uri: str,
    first: int,
    last: int,
    transactions: TransactionIndex | None = None,
) -> list[OffsetSplit]:
    """Input partitions for offsets [first, last) of one topic partition, from `snapshot`'s
    files holding them, about RECORDS_PER_SPLIT offsets each (batch and stream reads). With
    `transactions` (read_committed), each split names the aborted transactions in its range.

    The files of one snapshot never overlap in offsets and each slice is cut by offset, so every
    offset in range is read exactly once, however compaction or file optimization rewrote the
    files before; offsets a compacted topic no longer stores are simply not there.
    """
    splits, files, records = [], [], 0

    def cut() -> None:
        aborted = ()
        if transactions is not None:
            aborted = tuple(transactions.aborted_between(files[0].start, files[-1].end))
        splits.append(_split(topic, partition, table_uri, files, aborted))

    for data_file in snapshot.files:
        if data_file.max_offset < first or data_file.min_offset >= last:
            continue
        piece = FileSlice(data_file.path, max(first, data_file.min_offset), last)
        files.append(piece)
        records += min(last, data_file.max_offset + 1) - piece.start
        if records >= RECORDS_PER_SPLIT:
            cut()
            files, records = [], 0
    if files:
        cut()
    return splits


def _split(
    topic: str, partition: int, table_uri: str, files: list[FileSlice], aborted: tuple
) -> OffsetSplit:
    options = tuple(sorted(store.storage_options().items()))
    return OffsetSplit(topic, partition, table_uri, tuple(files), options, aborted)


# ---- reading (executors) ---------------------------------------------------------------------


# The records and `control` (transaction markers are not records to Spark's Kafka source
# either, FORMAT.md §14); read_committed splits with aborted transactions also need to tell
# whose records they are.
_COMMITTED_COLUMNS = [*PLAIN_READ_COLUMNS, "producer_id", "transactional"]
_COMMITTED_SCHEMA = pa.schema([FILE_SCHEMA.field(name) for name in _COMMITTED_COLUMNS])


def read_split(split: OffsetSplit, *, include_headers: bool) -> Iterator[pa.RecordBatch]:
    """The records of `split` as Arrow batches in Spark's Kafka schema, read from its Parquet
    files with pyarrow. Needs nothing but the split (no driver state), so it runs on executors.
    """
    if not isinstance(split, OffsetSplit):
        return  # no split at all (nothing in range): Spark still runs one empty task
    store.adopt(dict(split.storage_options))
    table_store = store.open_store(split.table_uri)
    columns, schema = list(PLAIN_READ_COLUMNS), PLAIN_READ_SCHEMA  # pyarrow takes lists
    if split.aborted:
        columns, schema = _COMMITTED_COLUMNS, _COMMITTED_SCHEMA
    for piece in split.files:
        table = pq.read_table(
            table_store.open_input(piece.path),
            columns=columns,
            filters=(
                (pc.field("offset") >= piece.start)
                & (pc.field("offset") < piece.end)
                & pc.field("control").is_null()
            ),
            # Files rewritten by delta-rs (DELETE, OPTIMIZE) store binary_view/string_view,
            # which pyarrow cannot filter: the scan casts them to the table's types first.
            schema=schema,
        )
        if split.aborted and table.num_rows:
            table = table.filter(pc.invert(aborted_mask(table, split.aborted)))
        if table.num_rows:
            yield from _kafka_rows(table, split, include_headers).to_batches()


def _kafka_rows(table: pa.Table, split: OffsetSplit, include_headers: bool) -> pa.Table:
    count = table.num_rows
    columns = {
        "key": table.column("key"),
        "value": table.column("value"),
        "topic": pa.array([split.topic] * count, pa.string()),
        "partition": pa.array([split.partition] * count, pa.int32()),
        "offset": table.column("offset"),
        "timestamp": table.column("timestamp"),
        "timestampType": table.column("timestamp_type").cast(pa.int32()),
    }
    if include_headers:
        headers = table.column("headers")
        empty = pc.equal(pc.list_value_length(headers), 0)
        columns["headers"] = pc.if_else(
            pc.fill_null(empty, False), pa.nulls(count, headers.type), headers
        )
    return pa.table(columns).sort_by("offset")


def _lowercase(options: Mapping[str, str]) -> dict[str, str]:
    """Spark's option names are case-insensitive: keep them lower-cased, look them up so."""
    return {str(key).lower(): value for key, value in options.items()}


def _opt(options: Mapping[str, str], name: str) -> str | None:
    return _lowercase(options).get(name.lower())


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = _opt(options, name)
    if value is None:
        return default
    if str(value).lower() not in ("true", "false"):
        raise ValueError(f"Option {name} must be true or false, not {value!r}.")
    return str(value).lower() == "true"
