"""read_topic reads a topic as Spark's Kafka source would: same schema, rows, offset options."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pipeline.read import read_topic
from pipeline.spark import build_spark_session
from storage_layout.errors import TopicNotFound
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.paths import partition_table_uri
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig

pytestmark = pytest.mark.spark

# Written out here, not imported from pipeline, so the test checks the code against Spark's
# Kafka source (KafkaRecordToRowConverter): every field nullable, in this order.
HEADER_STRUCT = StructType(
    [StructField("key", StringType(), True), StructField("value", BinaryType(), True)]
)
EXPECTED_FIELDS = [
    ("key", BinaryType(), True),
    ("value", BinaryType(), True),
    ("topic", StringType(), True),
    ("partition", IntegerType(), True),
    ("offset", LongType(), True),
    ("timestamp", TimestampType(), True),
    ("timestampType", IntegerType(), True),
]
EXPECTED_HEADERS_FIELD = ("headers", ArrayType(HEADER_STRUCT, True), True)
KAFKA = StructType([StructField(*field) for field in EXPECTED_FIELDS])
KAFKA_WITH_HEADERS = StructType([*KAFKA.fields, StructField(*EXPECTED_HEADERS_FIELD)])

BASE_MS = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z, a CreateTime with milliseconds


def at(ms: int) -> datetime:
    """The UTC instant `ms` milliseconds after the epoch."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def create_topic(root: str, name: str, partitions: int = 1, config: TopicConfig | None = None):
    TopicCatalog(root).create_topic(name, partitions, config or TopicConfig())


def append(root: str, topic: str, partition: int, records, *, config=None, now_ms=None):
    log = DeltaPartitionLog.open(partition_table_uri(root, topic, partition))
    log.append(records, config=config or TopicConfig(), now_ms=now_ms)


def values(count: int, *, start_ms: int = BASE_MS) -> list[NewRecord]:
    return [NewRecord(f"k{i}".encode(), f"v{i}".encode(), start_ms + i) for i in range(count)]


def positions(df):
    """(partition, offset) pairs of `df`, the identity of each record."""
    return df.select("partition", "offset")


def expected_positions(spark, pairs):
    schema = StructType([KAFKA["partition"], KAFKA["offset"]])
    return spark.createDataFrame(pairs, schema)


LOG_APPEND_TIME = TopicConfig.from_mapping({"message.timestamp.type": "LogAppendTime"})


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    """One storage root with every read-only topic of this module, written once: Spark caches
    each Delta table's state, so reusing tables keeps the module fast.

    - `mixed`: 1 partition, offsets 0-3 in two commits: keys, a null key, a tombstone, headers
      present (one with a null value) and absent.
    - `events`: partition 0 holds offsets 0-5 (two commits), partition 1 offsets 0-3.
    - `quiet`: 2 partitions, no records.
    - `created` (CreateTime) and `appended` (LogAppendTime, appended at BASE_MS + 500): 2 records.
    """
    root = str(tmp_path_factory.mktemp("lake"))
    create_topic(root, "mixed")
    first = [
        NewRecord(b"k0", b"v0", BASE_MS, (("trace", b"abc"), ("empty", None))),
        NewRecord(None, b"v1", BASE_MS + 1),
    ]
    append(root, "mixed", 0, first)
    second = [
        NewRecord(b"k0", None, BASE_MS + 2),
        NewRecord(b"k3", b"", BASE_MS + 3, (("h", b""),)),
    ]
    append(root, "mixed", 0, second)
    create_topic(root, "events", partitions=2)
    append(root, "events", 0, values(3))
    append(root, "events", 0, values(3, start_ms=BASE_MS + 3))
    append(root, "events", 1, values(4))
    create_topic(root, "quiet", partitions=2)
    create_topic(root, "created")
    append(root, "created", 0, values(2))
    create_topic(root, "appended", config=LOG_APPEND_TIME)
    append(root, "appended", 0, values(2), config=LOG_APPEND_TIME, now_ms=BASE_MS + 500)
    return root


def test_schema_is_spark_kafka_source_schema(spark, root):
    """Without headers the columns are Spark's Kafka source's: names, types, nullability, order."""
    df = read_topic(spark, root, "mixed")
    assert [(f.name, f.dataType, f.nullable) for f in df.schema] == EXPECTED_FIELDS


def test_schema_with_headers_appends_headers_column(spark, root):
    """include_headers adds headers array<struct<key string, value binary>> as the last column."""
    df = read_topic(spark, root, "mixed", include_headers=True)
    fields = [(f.name, f.dataType, f.nullable) for f in df.schema]
    assert fields == [*EXPECTED_FIELDS, EXPECTED_HEADERS_FIELD]
    assert df.schema["headers"].dataType.elementType == HEADER_STRUCT


def test_reads_every_record_with_kafka_columns(spark, root):
    """Keys, null keys, tombstones and CreateTime timestamps come back exactly, once each."""
    expected = spark.createDataFrame(
        [
            (b"k0", b"v0", "mixed", 0, 0, at(BASE_MS), 0),
            (None, b"v1", "mixed", 0, 1, at(BASE_MS + 1), 0),
            (b"k0", None, "mixed", 0, 2, at(BASE_MS + 2), 0),
            (b"k3", b"", "mixed", 0, 3, at(BASE_MS + 3), 0),
        ],
        KAFKA,
    )
    assert_df_equality(read_topic(spark, root, "mixed"), expected, ignore_row_order=True)


def test_headers_are_null_when_absent_and_kept_when_present(spark, root):
    """With include_headers a record without headers has NULL (not []), others keep theirs."""
    expected = spark.createDataFrame(
        [
            (b"k0", b"v0", "mixed", 0, 0, at(BASE_MS), 0, [("trace", b"abc"), ("empty", None)]),
            (None, b"v1", "mixed", 0, 1, at(BASE_MS + 1), 0, None),
            (b"k0", None, "mixed", 0, 2, at(BASE_MS + 2), 0, None),
            (b"k3", b"", "mixed", 0, 3, at(BASE_MS + 3), 0, [("h", b"")]),
        ],
        KAFKA_WITH_HEADERS,
    )
    actual = read_topic(spark, root, "mixed", include_headers=True)
    assert_df_equality(actual, expected, ignore_row_order=True)


def test_timestamps_are_exact_instants_with_their_type(spark, root):
    """CreateTime keeps the producer's milliseconds (type 0); LogAppendTime the append time (1)."""

    def instants(topic):
        df = read_topic(spark, root, topic)
        return df.select("offset", F.unix_millis("timestamp").alias("ms"), "timestampType")

    assert sorted(instants("created").collect()) == [(0, BASE_MS, 0), (1, BASE_MS + 1, 0)]
    assert sorted(instants("appended").collect()) == [(0, BASE_MS + 500, 1), (1, BASE_MS + 500, 1)]


def test_multi_partition_topic_unions_all_partitions(spark, root):
    """Every record of every partition is read once, tagged with its partition and offset."""
    expected = expected_positions(spark, [(0, o) for o in range(6)] + [(1, o) for o in range(4)])
    df = read_topic(spark, root, "events")
    assert_df_equality(positions(df), expected, ignore_row_order=True)
    assert {row.topic for row in df.select("topic").distinct().collect()} == {"events"}


def test_json_offsets_select_per_partition_ranges(spark, root):
    """JSON starting/ending offsets give [start, end) per partition; -2 earliest, -1 latest."""
    df = read_topic(
        spark,
        root,
        "events",
        starting_offsets=json.dumps({"events": {"0": 2, "1": -2}}),
        ending_offsets=json.dumps({"events": {"0": 4, "1": -1}}),
    )
    expected = expected_positions(spark, [(0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)])
    assert_df_equality(positions(df), expected, ignore_row_order=True)


def test_unmentioned_partitions_read_from_earliest_to_latest(spark, root):
    """Offsets as a dict naming one partition; the other partition is read whole."""
    df = read_topic(
        spark,
        root,
        "events",
        starting_offsets={"events": {1: 3}},
        ending_offsets={"events": {"0": 1}},
    )
    expected = expected_positions(spark, [(0, 0), (1, 3)])
    assert_df_equality(positions(df), expected, ignore_row_order=True)


def test_starting_latest_and_equal_bounds_give_no_rows(spark, root):
    """Starting at -1 (the high watermark) or with start == end reads nothing from a partition."""
    df = read_topic(
        spark,
        root,
        "events",
        starting_offsets={"events": {"0": -1, "1": 2}},
        ending_offsets={"events": {"1": 2}},
    )
    assert df.count() == 0


def test_latest_is_fixed_when_the_dataframe_is_built(spark, tmp_path):
    """Records appended after read_topic returns never appear in that DataFrame."""
    root = str(tmp_path)
    create_topic(root, "growing")
    append(root, "growing", 0, values(3))
    df = read_topic(spark, root, "growing")
    append(root, "growing", 0, values(5))
    assert df.count() == 3
    assert read_topic(spark, root, "growing").count() == 8


@pytest.mark.parametrize("include_headers", [False, True])
def test_empty_topic_gives_empty_dataframe_with_kafka_schema(spark, root, include_headers):
    """A topic without records reads as zero rows with the exact Kafka schema."""
    df = read_topic(spark, root, "quiet", include_headers=include_headers)
    expected = spark.createDataFrame([], KAFKA_WITH_HEADERS if include_headers else KAFKA)
    assert_df_equality(df, expected)


def test_unknown_topic_raises_topic_not_found(spark, root):
    """A topic missing from the catalog raises storage's TopicNotFound."""
    with pytest.raises(TopicNotFound, match="'absent'"):
        read_topic(spark, root, "absent")


@pytest.mark.parametrize(
    ("starting", "ending", "message"),
    [
        ("earliest", {"events": {"0": -2}}, "ending offset for events-0 can't be earliest"),
        ("earliest", "earliest", "ending offset can't be earliest"),
        ("latest", "latest", "starting offset can't be latest"),
        ({"events": {"0": 7}}, "latest", r"startingOffsets for events-0 is 7.*high_watermark 6"),
        ("earliest", {"events": {"1": 5}}, r"endingOffsets for events-1 is 5.*high_watermark 4"),
        ({"events": {"0": 4}}, {"events": {"0": 2}}, "starting offset 4 is after the ending"),
        ({"events": {"2": 0}}, "latest", "partition 2 of topic 'events'"),
        ({"orders": {"0": 0}}, "latest", "other than 'events'"),
        ({"events": {"0": -3}}, "latest", "must be an offset"),
        ('{"events": ', "latest", 'must be "earliest", "latest" or JSON'),
    ],
)
def test_invalid_offsets_raise_value_error(spark, root, starting, ending, message):
    """Offsets Spark's Kafka source rejects, or outside a partition's bounds, raise ValueError."""
    with pytest.raises(ValueError, match=message):
        read_topic(spark, root, "events", starting_offsets=starting, ending_offsets=ending)


def test_build_spark_session_reuses_active_session_with_lakelog_confs(spark):
    """With a session active, build_spark_session returns it and re-applies the runtime confs."""
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    assert build_spark_session() is spark
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    dv_default = "spark.databricks.delta.properties.defaults.enableDeletionVectors"
    assert spark.conf.get(dv_default) == "false"
    assert spark.conf.get("spark.sql.extensions") == "io.delta.sql.DeltaSparkSessionExtension"
