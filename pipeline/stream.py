"""`spark.readStream.format("lakelog")`: topics as streams, with Spark's Kafka source semantics.

    register_data_source(spark)
    stream = (
        spark.readStream.format("lakelog")
        .option("subscribe", "orders")
        .option("maxOffsetsPerTrigger", 10_000)
        .load("/data/lakelog")
    )

Offsets are Kafka's JSON, which Spark checkpoints: `{"orders": {"0": 23, "1": 5}}` holds the
next offset to read per partition (partition keys are strings). Topics and partitions are always
in order, so equal positions are equal JSON: Spark compares offsets as strings.

Options (the names of Spark's Kafka source):
- `subscribe` / `subscribePattern` / `assign`, exactly one, evaluated again at every trigger:
  partitions added to a topic, and new topics matching the pattern, are read from their
  earliest offset (Kafka's behaviour). A subscribed topic that does not exist (yet) has no
  partitions; an assigned partition must exist when the query starts.
- `startingOffsets`: "latest" (the default for streams), "earliest", or JSON
  `{"orders": {"0": 23, "1": -2}}` (-2 earliest, -1 latest; partitions the JSON leaves out start
  at earliest). `startingTimestamp` / `startingOffsetsByTimestamp` (epoch ms) take precedence.
  Resolved once, against the partitions there when the query starts; a restarted query goes on
  from its checkpoint. A query stopped before its first micro-batch has no checkpointed offsets
  and resolves them again when restarted (Spark's Kafka source keeps them in its own metadata
  log, which a Python source has no access to).
- `maxOffsetsPerTrigger`: at most that many offsets per micro-batch, split across partitions in
  proportion to what each has to read (KafkaMicroBatchStream.rateLimit; every partition with
  records advances). `minOffsetsPerTrigger` with `maxTriggerDelay` (default 15m): a batch waits
  until that many offsets are there or the delay has passed. Trigger.AvailableNow reads what
  was there when the query started, in batches of maxOffsetsPerTrigger, and ignores
  minOffsetsPerTrigger (it must end).
- `failOnDataLoss` (default true): offsets the stream still had to read that are gone (retention
  deleted them, the topic was deleted or recreated, a new partition starts above 0) fail the
  query with an error naming the partition and offsets; false logs a warning and skips them.
- `includeHeaders`; the storage root as `path` or `.load(root)`.
- `endingOffsets` / `endingOffsetsByTimestamp` / `endingTimestamp` are errors, as with Kafka.

Each micro-batch is planned from the partitions' current Delta snapshots by offset range
(`pipeline.source.plan_splits`), never by file identity, so files rewritten between batches
(file optimization, key compaction) give every offset once. Executors read the planned Parquet
files as the batch reader does (`pipeline.source.read_split`); each split carries all they need.

Spark versions: 4.2 calls `latestOffset(start, limit)` (admission control, `ReadLimit`) and runs
Trigger.AvailableNow through `SupportsTriggerAvailableNow`. 4.0 (Databricks Runtime 17) has
neither: it calls `latestOffset()`, and this reader applies maxOffsetsPerTrigger from the
position it tracks itself (the initial offsets, then the end of each batch Spark plans). There
Trigger.AvailableNow goes through Spark's wrapper, which asks for the latest offset once, so
with maxOffsetsPerTrigger such a run reads one capped batch and ends (nothing is lost: the next
run goes on from there).
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader

from pipeline.options import (
    EARLIEST,
    LATEST,
    TOPIC_OPTIONS,
    flag,
    isolation_of,
    load_offsets_json,
    lowercase,
    option_value,
    parse_offsets,
    root_of,
)
from pipeline.splits import OffsetSplit, by_timestamp, plan_splits, read_split
from storage_layout import paths
from storage_layout.errors import CorruptPartition, StorageUnavailable
from storage_layout.log import DeltaPartitionLog, LogSnapshot
from storage_layout.meta.catalog import TopicCatalog, TopicInfo

try:  # Spark >= 4.2: admission control and Trigger.AvailableNow for Python streaming sources.
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # Spark 4.0: no such module; Spark never passes a limit nor checks the mixin.

    class ReadLimit:  # type: ignore[no-redef]
        """Stand-in for Spark 4.2's ReadLimit."""

    @dataclass
    class ReadAllAvailable(ReadLimit):  # type: ignore[no-redef]
        """Stand-in for Spark 4.2's ReadAllAvailable."""

    @dataclass
    class ReadMaxRows(ReadLimit):  # type: ignore[no-redef]
        """Stand-in for Spark 4.2's ReadMaxRows."""

        max_rows: int

    @dataclass
    class ReadMinRows(ReadLimit):  # type: ignore[no-redef]
        """Stand-in for Spark 4.2's ReadMinRows."""

        min_rows: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in for Spark 4.2's mixin: Spark 4.0 wraps every source for AvailableNow."""


_LOG = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]

STARTING_OFFSETS_DEFAULT = "latest"
MAX_TRIGGER_DELAY_DEFAULT = "15m"
# Kafka's wording (KafkaSourceProvider.validateStreamOptions), by lower-cased option name.
_ENDING_OPTIONS = {
    "endingoffsets": "ending offset not valid in streaming queries",
    "endingoffsetsbytimestamp": "ending timestamp not valid in streaming queries",
    "endingtimestamp": "ending timestamp not valid in streaming queries",
}
_DURATION = re.compile(r"(\d+)\s*([a-z]*)")
_DURATION_UNIT_MS = {"": 1, "ms": 1, "s": 1_000, "m": 60_000, "min": 60_000, "h": 3_600_000}
_DURATION_UNIT_MS["d"] = 24 * _DURATION_UNIT_MS["h"]
_DATA_LOSS_HINT = (
    " Some data may have been lost because it is not stored any more: retention deleted it, or "
    "the topic was deleted or recreated before the stream read it. If you don't want the query "
    "to fail in such cases, set the source option failOnDataLoss to false: the stream then "
    "skips what is gone."
)


class DataLoss(RuntimeError):
    """Offsets a stream still had to read are gone. Set failOnDataLoss=false to skip them."""

    def __init__(self, topic: str, partition: int, message: str) -> None:
        super().__init__(message)
        self.topic, self.partition = topic, partition


# ---- options -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Subscription:
    """Which topic partitions a stream reads; matched against the catalog at every trigger.

    Exactly one of `topics` (subscribe), `pattern` (subscribePattern, a full match over topic
    names) and `assigned` (assign) is set.
    """

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Subscription:
        given = [name for name in TOPIC_OPTIONS if option_value(options, name)]
        if len(given) != 1:
            raise ValueError(
                "Exactly one of 'subscribe', 'subscribePattern' and 'assign' must be given, as "
                f"for Spark's Kafka source (got {given or 'none'})."
            )
        value = option_value(options, given[0])
        if given[0] == "assign":
            return cls(assigned=_parse_assign(value))
        if given[0] == "subscribePattern":
            re.compile(value)  # a bad pattern fails when the query starts, not at a trigger
            return cls(pattern=value)
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ValueError(f"subscribe names no topic: {value!r}.")
        return cls(topics=topics)

    def partitions(self, topics: Mapping[str, TopicInfo]) -> list[TopicPartition]:
        """The subscribed partitions that exist among `topics` (active topics by name)."""
        if self.assigned:
            return [(t, p) for t, p in self.assigned if t in topics and p < topics[t].partitions]
        if self.pattern is not None:
            names = [name for name in topics if re.fullmatch(self.pattern, name)]
        else:
            names = [name for name in self.topics if name in topics]
        return sorted((name, p) for name in names for p in range(topics[name].partitions))


@dataclass(frozen=True)
class StreamOptions:
    """A stream's options, checked when its reader is made (the query's start)."""

    root: str
    subscription: Subscription
    starting_offsets: str | Mapping  # "earliest", "latest", or Kafka's JSON, parsed
    include_headers: bool
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    committed: bool = False  # kafka.isolation.level=read_committed

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> StreamOptions:
        for name, message in _ENDING_OPTIONS.items():
            if option_value(options, name) is not None:
                raise ValueError(f"{message} (option {name}): a stream reads until it is stopped.")
        committed = isolation_of(options).needs_index
        max_offsets = _positive_int(options, "maxOffsetsPerTrigger")
        min_offsets = _positive_int(options, "minOffsetsPerTrigger")
        if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
            raise ValueError(
                f"minOffsetsPerTrigger ({min_offsets}) is higher than maxOffsetsPerTrigger "
                f"({max_offsets})."
            )
        return cls(
            root=root_of(options),
            subscription=Subscription.parse(options),
            starting_offsets=_starting_spec(option_value(options, "startingOffsets")),
            include_headers=flag(options, "includeHeaders", False),
            fail_on_data_loss=flag(options, "failOnDataLoss", True),
            max_offsets_per_trigger=max_offsets,
            min_offsets_per_trigger=min_offsets,
            max_trigger_delay_ms=_duration_ms(
                "maxTriggerDelay",
                option_value(options, "maxTriggerDelay") or MAX_TRIGGER_DELAY_DEFAULT,
            ),
            committed=committed,
        )


def _parse_assign(spec: str) -> tuple[TopicPartition, ...]:
    try:
        assigned = json.loads(spec)
    except json.JSONDecodeError as error:
        raise ValueError(f'assign must be JSON like {{"orders": [0, 1]}}: {error}') from None
    valid = isinstance(assigned, dict) and all(
        isinstance(ps, list) and all(type(p) is int and p >= 0 for p in ps)
        for ps in assigned.values()
    )
    if not valid or not assigned:
        raise ValueError(f'assign must be JSON like {{"orders": [0, 1]}}, not {spec!r}.')
    return tuple(sorted({(topic, p) for topic, ps in assigned.items() for p in ps}))


def _starting_spec(value: str | None) -> str | Mapping:
    spec = (value or STARTING_OFFSETS_DEFAULT).strip()
    if spec in ("earliest", "latest"):
        return spec
    return load_offsets_json(spec, option="startingOffsets")


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    value = option_value(options, name)
    if value is None:
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if number <= 0:
        raise ValueError(f"Option {name} must be a positive integer, not {value!r}.")
    return number


def _duration_ms(name: str, text: str) -> int:
    """Spark's time strings ("15m", "30s", "500ms", "1h", "2d"; no unit: ms) in ms."""
    match = _DURATION.fullmatch(str(text).strip().lower())
    if match is None or match.group(2) not in _DURATION_UNIT_MS:
        raise ValueError(f"Option {name} must be a duration like 15m, 30s or 500ms, not {text!r}.")
    return int(match.group(1)) * _DURATION_UNIT_MS[match.group(2)]


# ---- offsets -----------------------------------------------------------------------------------


def to_kafka_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Kafka's offsets JSON, topics and then partitions in order: equal offsets, equal JSON."""
    result: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        result.setdefault(topic, {})[str(partition)] = offsets[(topic, partition)]
    return result


def from_kafka_json(offsets: Mapping) -> PartitionOffsets:
    """Offsets by (topic, partition) from Kafka's offsets JSON (as Spark hands it back)."""
    return {
        (topic, int(partition)): int(offset)
        for topic, by_partition in offsets.items()
        for partition, offset in by_partition.items()
    }


def rate_limit(
    limit: int, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
) -> PartitionOffsets:
    """End offsets for a batch of about `limit` offsets, as Spark's KafkaMicroBatchStream does.

    Each partition of `latest` with offsets after its `start` gets a share of `limit` in
    proportion to how many it has: floored, but rounded up when below one so that no partition
    with records starves (the total may then pass `limit` by a few). Partitions with nothing to
    read keep their `latest` offset.

    Args:
        limit: maxOffsetsPerTrigger (> 0).
        start: the next offset per partition; must hold every partition of `latest`.
        latest: the end offset each partition could be read to.
    """
    sizes = {tp: end - start[tp] for tp, end in latest.items() if end - start[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    ends = {}
    for tp, end in latest.items():
        if tp not in sizes:
            ends[tp] = end
            continue
        share = limit * (sizes[tp] / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        ends[tp] = min(end, start[tp] + step)
    return ends


# ---- the reader --------------------------------------------------------------------------------


class LakelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader of lakelog topics with the semantics of Spark's Kafka source.

    Spark calls the planning methods (initialOffset, latestOffset, partitions, commit, ...) on one
    instance, from one thread of a driver-side Python process; that instance caches the catalog
    and one DeltaPartitionLog per partition, reloaded at every latestOffset. `read` runs on
    executors, on copies unpickled there without those caches: it uses nothing but its split.
    """

    def __init__(
        self, options: Mapping[str, str], typed: Mapping[str, pa.DataType] | None = None
    ) -> None:
        self._raw_options = lowercase(options)
        self._options = StreamOptions.parse(self._raw_options)
        # the typed columns (FORMAT.md §17) of the stream's schema, fixed when it starts
        self._typed = dict(typed or {})
        self._catalog: TopicCatalog | None = None
        self._logs: dict[TopicPartition, DeltaPartitionLog] = {}
        self._initial: PartitionOffsets | None = None  # resolved once: Spark may ask again
        self._position: PartitionOffsets | None = None  # Spark 4.0: where the next batch starts
        self._target: PartitionOffsets | None = None  # Trigger.AvailableNow: never read past
        self._latest: PartitionOffsets | None = None  # last seen high watermarks, for progress
        self._batch_let_through_ms = 0  # minOffsetsPerTrigger: when a batch last went ahead

    def __getstate__(self) -> dict:
        # Executors need the options only; the catalog and logs are driver-side (and hold locks).
        state = self.__dict__.copy()
        state.update(_catalog=None, _logs={})
        return state

    # ---- Spark's streaming API -----------------------------------------------------------------

    def initialOffset(self) -> dict:
        """Where a new query starts: startingOffsets / startingTimestamp, resolved once."""
        return to_kafka_json(self._initial_offsets())

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """The end of the next micro-batch: the partitions' high watermarks (or the
        Trigger.AvailableNow target), cut to `limit` and to the rate options.

        Spark 4.2 passes `start` (the previous batch's end) and `limit` (getDefaultReadLimit, or
        ReadAllAvailable when the trigger wants everything). Spark 4.0 passes neither: the start
        is then the position this reader tracked, and the options are the limit.
        """
        begin = from_kafka_json(start) if start is not None else self._tracked_position()
        latest = self._target if self._target is not None else self._high_watermarks()
        if self._options.committed:
            # A start past the last stable offset (startingOffsets given) waits there: the
            # end never goes below it (that would read as data loss).
            latest = {tp: max(end, begin.get(tp, end)) for tp, end in latest.items()}
        self._latest = latest
        # A partition the start does not know is new: Kafka reads it from its earliest offset.
        origins = {tp: begin[tp] if tp in begin else self._log_start(tp) for tp in latest}
        if self._should_wait(limit, origins, latest):
            return to_kafka_json(begin)
        max_rows = self._max_rows(limit)
        return to_kafka_json(latest if max_rows is None else rate_limit(max_rows, origins, latest))

    def getDefaultReadLimit(self) -> ReadLimit:
        """The options' limit (Spark 4.2 hands it back to latestOffset). A ReadMinRows limit has
        no room for maxTriggerDelay, so both rate options are read from this reader's options."""
        if self._options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._options.max_offsets_per_trigger)
        if self._options.min_offsets_per_trigger is not None:
            return ReadMinRows(self._options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict | None:
        """The high watermarks the last latestOffset saw (for the query's progress)."""
        return None if self._latest is None else to_kafka_json(self._latest)

    def prepareForTriggerAvailableNow(self) -> None:
        """Record the high watermarks now: this run reads up to them and no further."""
        self._target = None
        self._target = self._high_watermarks()

    def partitions(self, start: dict, end: dict) -> list[OffsetSplit]:
        """Splits for offsets [start, end) of every partition, from current Delta snapshots."""
        begin, until = from_kafka_json(start), from_kafka_json(end)
        self._position = until
        splits: list[OffsetSplit] = []
        for tp in sorted(begin.keys() | until.keys()):
            splits += self._plan(tp, begin.get(tp), until.get(tp))
        return splits

    def read(self, partition: OffsetSplit) -> Iterator[pa.RecordBatch]:
        return read_split(
            partition, include_headers=self._options.include_headers, typed=self._typed
        )

    def commit(self, end: dict) -> None:
        if self._position is None:  # Spark 4.0 restarting from a committed batch
            self._position = from_kafka_json(end)

    def stop(self) -> None:
        self._logs.clear()
        self._catalog = None

    # ---- offsets (driver) ----------------------------------------------------------------------

    def _initial_offsets(self) -> PartitionOffsets:
        if self._initial is None:
            topics = self._topics()
            for topic, partition in self._options.subscription.assigned:
                self._catalog_handle().topic(topic).check_partition(partition)
            initial = {}
            for tp in self._options.subscription.partitions(topics):
                if self._refresh(tp) is not None:
                    initial[tp] = self._starting_offset(tp, topics[tp[0]].partitions)
            self._initial = initial
        return self._initial

    def _starting_offset(self, tp: TopicPartition, partitions: int) -> int:
        topic, partition = tp
        spec = self._options.starting_offsets
        if isinstance(spec, str):
            start = EARLIEST if spec == "earliest" else LATEST
        else:
            given = {topic: spec[topic]} if topic in spec else {}
            offsets = parse_offsets(given, topic=topic, partitions=partitions, ending=False)
            start = offsets.get(partition, EARLIEST)
        log = self._logs[tp]
        start, _ = by_timestamp(self._raw_options, log, topic, partition, start=start, end=LATEST)
        bounds = log.bounds()
        resolved = {EARLIEST: bounds.log_start_offset, LATEST: self._end(tp, log.snapshot)}
        offset = resolved.get(start, start)
        if offset > bounds.high_watermark:
            raise ValueError(
                f"startingOffsets for {topic}-{partition} is {offset}, after the partition's "
                f"high_watermark {bounds.high_watermark}."
            )
        return offset  # below log_start_offset: the first batch applies failOnDataLoss

    def _tracked_position(self) -> PartitionOffsets:
        if self._position is None:
            self._position = self._initial_offsets()
        return self._position

    def _high_watermarks(self) -> PartitionOffsets:
        """Every subscribed partition's end (high watermark, or last stable offset when
        read_committed), from freshly reloaded snapshots."""
        current = self._options.subscription.partitions(self._topics())
        for gone in self._logs.keys() - set(current):
            del self._logs[gone]
        snapshots = {tp: self._refresh(tp) for tp in current}
        return {tp: self._end(tp, s) for tp, s in snapshots.items() if s is not None}

    def _end(self, tp: TopicPartition, snapshot: LogSnapshot) -> int:
        if self._options.committed:
            return self._logs[tp].last_stable_offset(snapshot)
        return snapshot.high_watermark

    def _should_wait(
        self, limit: ReadLimit | None, origins: PartitionOffsets, latest: PartitionOffsets
    ) -> bool:
        """minOffsetsPerTrigger: hold the batch back while fewer offsets are there, until
        maxTriggerDelay has passed since one last went ahead (Kafka's delayBatch)."""
        min_rows = self._options.min_offsets_per_trigger
        if isinstance(limit, ReadMinRows):
            min_rows = limit.min_rows
        if min_rows is None or isinstance(limit, ReadAllAvailable) or self._target is not None:
            return False
        now_ms = int(time.time() * 1000)
        waited_ms = now_ms - self._batch_let_through_ms
        available = sum(max(0, latest[tp] - origins[tp]) for tp in latest)
        if waited_ms < self._options.max_trigger_delay_ms and available < min_rows:
            return True
        self._batch_let_through_ms = now_ms
        return False

    def _max_rows(self, limit: ReadLimit | None) -> int | None:
        if isinstance(limit, ReadAllAvailable):
            return None
        if isinstance(limit, ReadMaxRows):
            return limit.max_rows
        return self._options.max_offsets_per_trigger

    # ---- planning (driver) ---------------------------------------------------------------------

    def _plan(self, tp: TopicPartition, first: int | None, last: int | None) -> list[OffsetSplit]:
        if first is not None and first == last:
            return []
        snapshot = None if last is None else self._snapshot_reaching(tp, last)
        if snapshot is None:
            self._data_loss(tp, f"is gone (its topic was deleted) at offset {first}")
            return []
        wanted = self._readable_range(tp, snapshot, first, last)
        if wanted is None:
            return []
        topic, partition = tp
        log = self._logs[tp]
        return plan_splits(
            snapshot,
            topic=topic,
            partition=partition,
            table_uri=log.table_uri,
            first=wanted[0],
            last=wanted[1],
            transactions=log.transaction_index(snapshot) if self._options.committed else None,
        )

    def _readable_range(
        self, tp: TopicPartition, snapshot: LogSnapshot, first: int | None, last: int
    ) -> tuple[int, int] | None:
        """[first, last) cut to what the partition still stores, each cut through failOnDataLoss;
        None when nothing is left to read."""
        low, high = snapshot.log_start_offset, snapshot.high_watermark
        if first is None:  # a partition added since the last batch: read from its earliest
            first = low
            if low > 0:
                self._data_loss(tp, f"was added with log_start_offset {low}, not 0")
        if last > high:
            self._data_loss(tp, f"ends at {high}, below offset {last}: was the topic recreated?")
            last = high
        if last < first:
            self._data_loss(tp, f"went back from offset {first} to {last}: topic recreated?")
            return None
        if first < last and first < low:
            self._data_loss(
                tp,
                f"the stream's next offset is {first} but log_start_offset is {low}: retention "
                f"deleted offsets {first} to {low - 1} before the stream read them",
            )
            first = low
        return (first, last) if first < last else None

    def _data_loss(self, tp: TopicPartition, detail: str) -> None:
        topic, partition = tp
        message = f"Partition {topic}-{partition} {detail}."
        if self._options.fail_on_data_loss:
            raise DataLoss(topic, partition, message + _DATA_LOSS_HINT)
        _LOG.warning("%s Skipping what is gone (failOnDataLoss=false).", message)

    # ---- partition logs (driver) ---------------------------------------------------------------

    def _snapshot_reaching(self, tp: TopicPartition, high_watermark: int) -> LogSnapshot | None:
        """The cached snapshot if it holds offsets up to `high_watermark`, else a reloaded one
        (a restarted query plans its last batch again before any latestOffset)."""
        log = self._logs.get(tp)
        if log is not None and log.snapshot.high_watermark >= high_watermark:
            return log.snapshot
        return self._refresh(tp)

    def _refresh(self, tp: TopicPartition) -> LogSnapshot | None:
        """`tp`'s latest snapshot (catching its cached log up, else opening it), or None when the
        partition is gone: its topic was deleted since the catalog was read."""
        try:
            log = self._logs.get(tp)
            if log is None:
                log = DeltaPartitionLog.open(paths.partition_table_uri(self._options.root, *tp))
                self._logs[tp] = log
                return log.snapshot
            log.catch_up()  # a stat of the next commit file unless the log moved
            return log.snapshot
        except (CorruptPartition, StorageUnavailable):
            if tp in self._options.subscription.partitions(self._topics()):
                raise  # the partition exists: a real storage failure, never skipped
            self._logs.pop(tp, None)
            return None

    def _log_start(self, tp: TopicPartition) -> int:
        log = self._logs.get(tp)
        snapshot = log.snapshot if log is not None else self._refresh(tp)
        return 0 if snapshot is None else snapshot.log_start_offset

    def _topics(self) -> dict[str, TopicInfo]:
        return self._catalog_handle().topics()

    def _catalog_handle(self) -> TopicCatalog:
        if self._catalog is None:
            self._catalog = TopicCatalog(self._options.root)
        return self._catalog
