"""`spark.readStream.format("lakelog")` (pipeline/stream.py): Spark's Kafka source semantics for
streams, checked with real micro-batches into a Delta sink, plus the reader's planning calls."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from pipeline.source import register_data_source
from pipeline.stream import DataLoss, LakelogStreamReader, rate_limit
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.paths import partition_table_uri
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig

pytestmark = pytest.mark.spark

QUERY_TIMEOUT_S = 120
# Every append starts a new segment (files are bigger than this): lets a test delete the oldest
# segments as retention would.
ONE_APPEND_SEGMENTS = TopicConfig.from_mapping({"segment.bytes": "100"})


@pytest.fixture(scope="module")
def lakelog(spark):
    register_data_source(spark)
    return spark


def _produce(root: str, topic: str, partition: int, count: int, config=TopicConfig()) -> None:
    """One append (one commit, one file) of `count` records, every other one with a header."""
    log = DeltaPartitionLog.open(partition_table_uri(root, topic, partition))
    first = log.snapshot.high_watermark
    records = [
        NewRecord(b"k", f"{topic}-{partition}-{first + i}".encode(), headers=h)
        for i, h in zip(range(count), [(), (("trace", b"t"),)] * count, strict=False)
    ]
    log.append(records, config=config)


def _stream(spark, root: str, **options: str):
    reader = spark.readStream.format("lakelog")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load(root)


def _available_now(frame, tmp_path: Path):
    """Run `frame` to a Delta sink with Trigger.AvailableNow until it ends (raises its error)."""
    query = (
        frame.writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start(str(tmp_path / "sink"))
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the AvailableNow query did not end"
    return query


def _continuous(frame, tmp_path: Path):
    """Start `frame` to a Delta sink with the default trigger (a batch as soon as data is there)."""
    return (
        frame.writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start(str(tmp_path / "sink"))
    )


def _positions(spark, tmp_path: Path) -> list[tuple[str, int, int]]:
    rows = spark.read.format("delta").load(str(tmp_path / "sink")).collect()
    return sorted((r.topic, r.partition, r.offset) for r in rows)


def _batch_sizes(query) -> list[int]:
    return [p.numInputRows for p in query.recentProgress if p.numInputRows]


def _checkpointed_offsets(tmp_path: Path) -> list[dict]:
    """The source offsets Spark wrote per batch (last line of each offsets/<batch> file)."""
    directory = tmp_path / "checkpoint" / "offsets"
    batches = sorted(
        (f for f in directory.iterdir() if f.name.isdigit()), key=lambda f: int(f.name)
    )
    return [json.loads(f.read_text().strip().splitlines()[-1]) for f in batches]


def _complete(topic: str, partition: int, offsets) -> list[tuple[str, int, int]]:
    return [(topic, partition, offset) for offset in offsets]


# ---- micro-batches ---------------------------------------------------------------------------


def test_available_now_cuts_batches_at_max_offsets_per_trigger(lakelog, tmp_path):
    """AvailableNow reads everything in proportional batches of maxOffsetsPerTrigger, and the
    sink holds exactly what a batch read of the topic holds (headers included)."""
    root = str(tmp_path / "data")
    TopicCatalog(root).create_topic("orders", 2, TopicConfig())
    _produce(root, "orders", 0, 12)
    _produce(root, "orders", 1, 6)
    frame = _stream(
        lakelog,
        root,
        subscribe="orders",
        startingOffsets="earliest",
        maxOffsetsPerTrigger="6",
        includeHeaders="true",
    )
    query = _available_now(frame, tmp_path)
    # 12:6 split 4:2 per batch, three times (Kafka's rateLimit).
    assert _batch_sizes(query) == [6, 6, 6]
    assert _checkpointed_offsets(tmp_path) == [
        {"orders": {"0": 4, "1": 2}},
        {"orders": {"0": 8, "1": 4}},
        {"orders": {"0": 12, "1": 6}},
    ]
    sink = lakelog.read.format("delta").load(str(tmp_path / "sink"))
    batch = (
        lakelog.read.format("lakelog")
        .option("subscribe", "orders")
        .option("includeHeaders", "true")
        .load(root)
    )
    assert_df_equality(sink, batch, ignore_row_order=True, ignore_nullable=True)
    assert sink.where("headers is not null").count() == 9


def test_restart_from_checkpoint_reads_every_record_once(lakelog, tmp_path):
    """A query stopped mid-way and restarted after more appends leaves each record in the sink
    exactly once, and its checkpoint holds Kafka-shaped offsets."""
    root = str(tmp_path / "data")
    TopicCatalog(root).create_topic("events", 2, TopicConfig())
    for partition in (0, 1):
        _produce(root, "events", partition, 10)
    options = {"subscribe": "events", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "4"}
    query = _continuous(_stream(lakelog, root, **options), tmp_path)
    deadline = time.monotonic() + QUERY_TIMEOUT_S
    while not _batch_sizes(query) and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()
    first_run = _positions(lakelog, tmp_path)
    assert 0 < len(first_run) < 20, "the first run should have stopped mid-way"
    for partition in (0, 1):
        _produce(root, "events", partition, 5)
    del options["maxOffsetsPerTrigger"]  # options may change across restarts; one batch is quicker
    _available_now(_stream(lakelog, root, **options), tmp_path)
    expected = _complete("events", 0, range(15)) + _complete("events", 1, range(15))
    assert _positions(lakelog, tmp_path) == expected
    offsets = _checkpointed_offsets(tmp_path)
    assert offsets[-1] == {"events": {"0": 15, "1": 15}}
    assert all(set(o) == {"events"} and set(o["events"]) == {"0", "1"} for o in offsets)


def test_new_partitions_and_topics_are_read_from_offset_zero(lakelog, tmp_path):
    """Partitions added to a topic and topics created to match subscribePattern between runs are
    read from offset 0, whatever startingOffsets said."""
    root = str(tmp_path / "data")
    catalog = TopicCatalog(root)
    catalog.create_topic("grow", 1, TopicConfig())
    _produce(root, "grow", 0, 3)
    options = {"subscribePattern": "grow.*", "startingOffsets": json.dumps({"grow": {"0": 1}})}
    _available_now(_stream(lakelog, root, **options), tmp_path)
    assert _positions(lakelog, tmp_path) == _complete("grow", 0, [1, 2])
    catalog.alter_topic("grow", partitions=2)
    _produce(root, "grow", 1, 2)
    _produce(root, "grow", 0, 1)
    for name in ("grow2", "other"):
        catalog.create_topic(name, 1, TopicConfig())
        _produce(root, name, 0, 2)
    _available_now(_stream(lakelog, root, **options), tmp_path)
    expected = (
        _complete("grow", 0, [1, 2, 3])
        + _complete("grow", 1, [0, 1])
        + _complete("grow2", 0, [0, 1])
    )
    assert _positions(lakelog, tmp_path) == expected


def test_retention_between_batches_follows_fail_on_data_loss(lakelog, tmp_path):
    """Retention passing the checkpointed offset fails the restarted query with a message naming
    the partition and offsets; failOnDataLoss=false goes on from log_start_offset."""
    root = str(tmp_path / "data")
    TopicCatalog(root).create_topic("trimmed", 1, TopicConfig())
    uri = partition_table_uri(root, "trimmed", 0)
    _produce(root, "trimmed", 0, 4, ONE_APPEND_SEGMENTS)
    _available_now(
        _stream(lakelog, root, subscribe="trimmed", startingOffsets="earliest"), tmp_path
    )
    _produce(root, "trimmed", 0, 4, ONE_APPEND_SEGMENTS)
    _produce(root, "trimmed", 0, 4, ONE_APPEND_SEGMENTS)
    DeltaTable(uri).delete("segment < 8")  # offsets 0..7 go: log_start_offset becomes 8
    assert DeltaPartitionLog.open(uri).bounds().log_start_offset == 8
    with pytest.raises(
        Exception, match=r"trimmed-0 .*next offset is 4 .*log_start_offset is 8"
    ) as failed:
        _available_now(_stream(lakelog, root, subscribe="trimmed"), tmp_path)
    assert "set the source option failOnDataLoss to false" in str(failed.value)
    lenient = _stream(lakelog, root, subscribe="trimmed", failOnDataLoss="false")
    _available_now(lenient, tmp_path)
    expected = _complete("trimmed", 0, [0, 1, 2, 3, 8, 9, 10, 11])
    assert _positions(lakelog, tmp_path) == expected


def test_starting_offsets_default_to_latest(lakelog, tmp_path):
    """A stream without startingOffsets reads only what is appended after it started."""
    root = str(tmp_path / "data")
    TopicCatalog(root).create_topic("live", 1, TopicConfig())
    _produce(root, "live", 0, 3)
    query = _continuous(_stream(lakelog, root, subscribe="live"), tmp_path)
    try:
        query.processAllAvailable()
        _produce(root, "live", 0, 2)
        query.processAllAvailable()
    finally:
        query.stop()
    assert _positions(lakelog, tmp_path) == _complete("live", 0, [3, 4])


def test_file_rewrite_between_batches_gives_no_duplicates(lakelog, tmp_path):
    """Small-file compaction merging read and unread offsets into one file, then a key
    compaction leaving a gap, give each remaining offset once."""
    root = str(tmp_path / "data")
    TopicCatalog(root).create_topic("merged", 1, TopicConfig())
    uri = partition_table_uri(root, "merged", 0)
    for _ in range(25):
        _produce(root, "merged", 0, 1)
    options = {"subscribe": "merged", "startingOffsets": "earliest"}
    _available_now(_stream(lakelog, root, **options), tmp_path)
    for _ in range(15):
        _produce(root, "merged", 0, 1)
    log = DeltaPartitionLog.open(uri)
    assert log.maybe_merge_small_files() == 40  # one file now holds offsets 0..39
    DeltaTable(uri).delete("offset = 30")  # as keep-latest-per-key would
    assert len(DeltaPartitionLog.open(uri).snapshot.files) == 1
    _available_now(_stream(lakelog, root, **options), tmp_path)
    expected = _complete("merged", 0, [o for o in range(40) if o != 30])
    assert _positions(lakelog, tmp_path) == expected


def test_ending_offsets_are_rejected(lakelog, tmp_path):
    """endingOffsets has no meaning for a stream: the query fails with Kafka's message."""
    root = str(tmp_path / "data")
    TopicCatalog(root).create_topic("t", 1, TopicConfig())
    frame = _stream(lakelog, root, subscribe="t", endingOffsets="latest")
    with pytest.raises(Exception, match="ending offset not valid in streaming queries"):
        _available_now(frame, tmp_path)
    with pytest.raises(ValueError, match="ending timestamp not valid"):
        LakelogStreamReader({"path": root, "subscribe": "t", "endingTimestamp": "5"})


# ---- the reader's planning calls (no Spark job) ------------------------------------------------


@pytest.fixture
def clicks(tmp_path) -> str:
    """Topic clicks: one partition, records at CreateTime 1000, 5000, 3000, 7000 (offsets 0-3)."""
    root = str(tmp_path)
    TopicCatalog(root).create_topic("clicks", 1, TopicConfig())
    log = DeltaPartitionLog.open(partition_table_uri(root, "clicks", 0))
    for stamp in (1_000, 5_000, 3_000, 7_000):
        log.append([NewRecord(None, b"v", stamp)], config=TopicConfig())
    return root


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, 4),
        ({"startingOffsets": "earliest"}, 0),
        ({"startingOffsets": json.dumps({"clicks": {"0": 2}})}, 2),
        ({"startingOffsets": json.dumps({"clicks": {"0": -2}})}, 0),
        ({"startingOffsets": json.dumps({"other": {"0": 3}})}, 0),
        ({"startingTimestamp": "4000", "startingOffsets": "latest"}, 1),
        ({"startingOffsetsByTimestamp": json.dumps({"clicks": {"0": 6000}})}, 3),
    ],
)
def test_initial_offset_options(clicks, options, expected):
    """startingOffsets (latest by default, earliest, JSON) and the timestamp options, which take
    precedence, resolve to Kafka-shaped JSON."""
    reader = LakelogStreamReader({"path": clicks, "subscribe": "clicks", **options})
    assert reader.initialOffset() == {"clicks": {"0": expected}}


def test_bad_options_fail_with_clear_errors(clicks):
    """Unusable options are rejected when the reader is made, each naming the option."""
    base = {"path": clicks, "subscribe": "clicks"}
    cases = [
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be a positive integer"),
        ({"minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"}, "higher than"),
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay must be a duration"),
        ({"startingOffsets": "{nope"}, "startingOffsets must be"),
        ({"assign": '{"clicks": [0]}'}, "Exactly one of"),
        ({"subscribe": " , "}, "subscribe names no topic"),
    ]
    for extra, message in cases:
        with pytest.raises(ValueError, match=message):
            LakelogStreamReader({**base, **extra})
    reader = LakelogStreamReader(
        {"path": clicks, "subscribe": "clicks", "startingTimestamp": "9999"}
    )
    with pytest.raises(ValueError, match="No record of clicks-0"):
        reader.initialOffset()


def test_rate_limit_is_kafkas():
    """Shares are proportional, floored, and rounded up below one so no partition starves."""
    a, b, c = ("t", 0), ("t", 1), ("t", 2)
    assert rate_limit(6, {a: 0, b: 0}, {a: 12, b: 6}) == {a: 4, b: 2}
    assert rate_limit(6, {a: 0, b: 0, c: 0}, {a: 12, b: 6, c: 1}) == {a: 3, b: 1, c: 1}
    assert rate_limit(100, {a: 10, b: 0}, {a: 12, b: 6}) == {a: 12, b: 6}
    assert rate_limit(5, {a: 12, b: 6}, {a: 12, b: 6}) == {a: 12, b: 6}


def test_spark_4_0_calling_convention(clicks):
    """Spark 4.0 calls latestOffset() without arguments: maxOffsetsPerTrigger applies from the
    position the reader tracks (initial offset, then each planned batch's end)."""
    reader = LakelogStreamReader(
        {"path": clicks, "subscribe": "clicks", "startingOffsets": "earliest"}
        | {"maxOffsetsPerTrigger": "3"}
    )
    start = reader.initialOffset()
    end = reader.latestOffset()
    assert (start, end) == ({"clicks": {"0": 0}}, {"clicks": {"0": 3}})
    splits = reader.partitions(start, end)
    assert [(s.partition, [(f.start, f.end) for f in s.files]) for s in splits] == [
        (0, [(0, 3), (1, 3), (2, 3)])
    ]
    assert reader.latestOffset() == {"clicks": {"0": 4}}
    assert reader.latestOffset() == {"clicks": {"0": 4}}  # nothing planned in between: same batch


def test_spark_4_2_admission_control(clicks):
    """Spark 4.2 sees parameters on latestOffset (admission control) and the AvailableNow mixin;
    ReadAllAvailable overrides the options; the AvailableNow target is never passed."""
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )

    options = {"path": clicks, "subscribe": "clicks", "startingOffsets": "earliest"}
    reader = LakelogStreamReader({**options, "maxOffsetsPerTrigger": "3"})
    assert inspect.signature(reader.latestOffset).parameters
    assert isinstance(reader, SupportsTriggerAvailableNow)
    assert reader.getDefaultReadLimit() == ReadMaxRows(3)
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadMaxRows(3)) == {"clicks": {"0": 3}}
    assert reader.latestOffset(start, ReadAllAvailable()) == {"clicks": {"0": 4}}
    reader.prepareForTriggerAvailableNow()
    _produce(clicks, "clicks", 0, 2)
    assert reader.latestOffset({"clicks": {"0": 3}}, ReadMaxRows(3)) == {"clicks": {"0": 4}}
    assert reader.reportLatestOffset() == {"clicks": {"0": 4}}


def test_min_offsets_per_trigger_waits_until_max_trigger_delay(clicks):
    """minOffsetsPerTrigger holds a batch back while fewer offsets are there; a passed
    maxTriggerDelay or ReadAllAvailable lets it through."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMinRows

    waiting = LakelogStreamReader(
        {"path": clicks, "subscribe": "clicks", "minOffsetsPerTrigger": "3"}
        | {"maxTriggerDelay": "1h", "startingOffsets": "earliest"}
    )
    assert waiting.getDefaultReadLimit() == ReadMinRows(3)
    start = {"clicks": {"0": 0}}
    assert waiting.latestOffset(start, ReadMinRows(3)) == {"clicks": {"0": 4}}  # first batch
    start = {"clicks": {"0": 2}}
    assert waiting.latestOffset(start, ReadMinRows(3)) == start  # 2 < 3 and within the delay
    assert waiting.latestOffset(start, ReadAllAvailable()) == {"clicks": {"0": 4}}
    impatient = LakelogStreamReader(
        {"path": clicks, "subscribe": "clicks", "minOffsetsPerTrigger": "3"}
        | {"maxTriggerDelay": "0s"}
    )
    assert impatient.latestOffset(start, ReadMinRows(3)) == {"clicks": {"0": 4}}


def test_deleted_topic_is_data_loss(clicks):
    """A partition whose topic was deleted: DataLoss by default, skipped with
    failOnDataLoss=false."""
    options = {"path": clicks, "subscribe": "clicks", "startingOffsets": "earliest"}
    strict = LakelogStreamReader(options)
    lenient = LakelogStreamReader({**options, "failOnDataLoss": "false"})
    start = strict.initialOffset()
    assert lenient.initialOffset() == start == {"clicks": {"0": 0}}
    TopicCatalog(clicks).delete_topic("clicks")
    for reader in (strict, lenient):
        assert reader.latestOffset(start, None) == {}
    with pytest.raises(DataLoss, match=r"clicks-0 is gone .* at offset 0"):
        strict.partitions(start, {})
    assert lenient.partitions(start, {}) == []


def test_subscribed_topic_created_later_is_read_from_offset_zero(tmp_path):
    """Subscribing to a topic that does not exist yet is no error (Kafka's behaviour): once it
    exists its partitions are new partitions, planned from offset 0."""
    root = str(tmp_path)
    reader = LakelogStreamReader({"path": root, "subscribe": "later"})
    start = reader.initialOffset()
    assert start == {} and reader.latestOffset(start, None) == {}
    TopicCatalog(root).create_topic("later", 1, TopicConfig())
    _produce(root, "later", 0, 3)
    end = reader.latestOffset(start, None)
    assert end == {"later": {"0": 3}}
    [split] = reader.partitions(start, end)
    assert (split.topic, [(f.start, f.end) for f in split.files]) == ("later", [(0, 3)])


def test_module_imports_without_spark_4_2_streaming_api():
    """On Spark 4.0 `pyspark.sql.streaming.datasource` does not exist: the module still imports
    and its reader still works with the no-argument latestOffset."""
    code = (
        # pyspark 4.2's own modules need it: load them first, then hide it from ours.
        "import sys, pyspark.sql.datasource\n"
        "sys.modules['pyspark.sql.streaming.datasource'] = None\n"
        "import pipeline.stream as s\n"
        "assert s.ReadMaxRows(3).max_rows == 3 and not s.ReadAllAvailable.__module__.startswith("
        "'pyspark')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
