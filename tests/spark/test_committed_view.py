"""FORMAT.md §14's query for plain Delta readers, run by Spark on a partition table with
committed, aborted and still open transactions: only committed and plain records remain."""

from __future__ import annotations

import pytest

from pipeline.read import read_topic
from pipeline.source import register_data_source
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.paths import partition_table_uri
from storage_layout.records import NewRecord
from storage_layout.schema import CONTROL_ABORT, CONTROL_COMMIT
from storage_layout.topic_config import TopicConfig

pytestmark = pytest.mark.spark

CONFIG = TopicConfig()
COMMITTED_VIEW = """
SELECT value FROM (
  SELECT *, first(control, true) OVER (
      PARTITION BY producer_id, transactional ORDER BY offset
      ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS fate
  FROM delta.`{uri}`)
WHERE control IS NULL AND (transactional IS NULL OR NOT transactional OR fate = 1)
ORDER BY offset
"""


def test_the_committed_view_keeps_committed_and_plain_records_only(spark, tmp_path):
    uri = str(tmp_path / "t" / "0")
    DeltaPartitionLog.create(uri)
    log = DeltaPartitionLog.open(uri)

    def txn(producer: int, sequence: int, *names: str) -> None:
        producers = [(producer, 0, sequence + i, True) for i in range(len(names))]
        log.append([NewRecord(None, n.encode()) for n in names], config=CONFIG, producers=producers)

    txn(1, 0, "p1-committed-a")
    txn(2, 0, "p2-aborted")
    log.append([NewRecord(None, b"plain")], config=CONFIG)
    txn(1, 1, "p1-committed-b")
    log.append_marker(2, 0, CONTROL_ABORT, config=CONFIG)
    log.append_marker(1, 0, CONTROL_COMMIT, config=CONFIG)
    txn(2, 1, "p2-committed")
    txn(1, 2, "p1-open")
    log.append_marker(2, 0, CONTROL_COMMIT, config=CONFIG)

    rows = spark.sql(COMMITTED_VIEW.format(uri=uri)).collect()
    assert [bytes(row.value).decode() for row in rows] == [
        "p1-committed-a",
        "plain",
        "p1-committed-b",
        "p2-committed",
    ]


def test_spark_readers_of_a_topic_never_return_markers(spark, tmp_path):
    """read_topic and format("lakelog") return records as Spark's Kafka source does
    (read_uncommitted): the aborted record is there, the two markers are not."""
    root = str(tmp_path / "root")
    TopicCatalog(root).create_topic("txns", 1, CONFIG)
    log = DeltaPartitionLog.open(partition_table_uri(root, "txns", 0))
    producers = [(1, 0, 0, True)]
    log.append([NewRecord(None, b"aborted")], config=CONFIG, producers=producers)
    log.append_marker(1, 0, CONTROL_ABORT, config=CONFIG)
    log.append([NewRecord(None, b"plain")], config=CONFIG)
    log.append([NewRecord(None, b"committed")], config=CONFIG, producers=[(2, 0, 0, True)])
    log.append_marker(2, 0, CONTROL_COMMIT, config=CONFIG)
    expected = [(0, b"aborted"), (2, b"plain"), (3, b"committed")]

    rows = read_topic(spark, root, "txns").orderBy("offset").collect()
    assert [(row.offset, bytes(row.value)) for row in rows] == expected
    register_data_source(spark)
    rows = spark.read.format("lakelog").option("subscribe", "txns").load(root).collect()
    assert sorted((row.offset, bytes(row.value)) for row in rows) == expected


def open_transaction_partition(root: str) -> DeltaPartitionLog:
    """0 aborted (producer 1) | 1 ABORT | 2 plain | 3 committed (producer 2) | 4 COMMIT |
    5 open (producer 3) | 6 plain, after the open transaction's first record."""
    TopicCatalog(root).create_topic("txns", 1, CONFIG)
    log = DeltaPartitionLog.open(partition_table_uri(root, "txns", 0))
    log.append([NewRecord(None, b"aborted")], config=CONFIG, producers=[(1, 0, 0, True)])
    log.append_marker(1, 0, CONTROL_ABORT, config=CONFIG)
    log.append([NewRecord(None, b"plain")], config=CONFIG)
    log.append([NewRecord(None, b"committed")], config=CONFIG, producers=[(2, 0, 0, True)])
    log.append_marker(2, 0, CONTROL_COMMIT, config=CONFIG)
    log.append([NewRecord(None, b"open")], config=CONFIG, producers=[(3, 0, 0, True)])
    log.append([NewRecord(None, b"plain-after")], config=CONFIG)
    return log


def committed_read(spark, root: str, **options: str) -> list[tuple[int, bytes]]:
    reader = spark.read.format("lakelog").option("subscribe", "txns")
    reader = reader.option("kafka.isolation.level", "read_committed")
    for name, value in options.items():
        reader = reader.option(name, value)
    return sorted((row.offset, bytes(row.value)) for row in reader.load(root).collect())


def test_format_lakelog_read_committed_leaves_out_aborted_records_and_open_ones(spark, tmp_path):
    """As Spark's Kafka source with kafka.isolation.level=read_committed: the aborted record is
    left out, and "latest" is the last stable offset (5), so neither the open transaction's
    record nor the plain one after it is read yet."""
    root = str(tmp_path / "root")
    log = open_transaction_partition(root)
    register_data_source(spark)
    assert committed_read(spark, root) == [(2, b"plain"), (3, b"committed")]
    # An explicit end past the last stable offset stops there too.
    assert committed_read(spark, root, endingOffsets='{"txns": {"0": 7}}') == [
        (2, b"plain"),
        (3, b"committed"),
    ]
    log.append_marker(3, 0, CONTROL_ABORT, config=CONFIG)
    assert committed_read(spark, root) == [(2, b"plain"), (3, b"committed"), (6, b"plain-after")]


def test_a_read_committed_stream_waits_for_the_open_transaction(spark, tmp_path):
    root = str(tmp_path / "root")
    log = open_transaction_partition(root)
    register_data_source(spark)

    def run_available_now() -> list[tuple[int, bytes]]:
        frame = (
            spark.readStream.format("lakelog")
            .option("subscribe", "txns")
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .load(root)
        )
        query = (
            frame.writeStream.format("delta")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start(str(tmp_path / "sink"))
        )
        assert query.awaitTermination(120), "the AvailableNow query did not end"
        rows = spark.read.format("delta").load(str(tmp_path / "sink")).collect()
        return sorted((row.offset, bytes(row.value)) for row in rows)

    assert run_available_now() == [(2, b"plain"), (3, b"committed")]
    log.append_marker(3, 0, CONTROL_COMMIT, config=CONFIG)
    assert run_available_now() == [
        (2, b"plain"),
        (3, b"committed"),
        (5, b"open"),
        (6, b"plain-after"),
    ]


def test_an_unknown_isolation_level_names_the_two_valid_ones(spark, tmp_path):
    root = str(tmp_path / "root")
    TopicCatalog(root).create_topic("txns", 1, CONFIG)
    register_data_source(spark)
    reader = spark.read.format("lakelog").option("subscribe", "txns")
    with pytest.raises(Exception, match="must be read_uncommitted or read_committed"):
        reader.option("kafka.isolation.level", "serializable").load(root).collect()
    reader = reader.option("kafka.isolation.level", "read_uncommitted")
    assert reader.load(root).collect() == []


def test_read_committed_from_past_the_last_stable_offset_reads_nothing_yet(spark, tmp_path):
    root = str(tmp_path / "root")
    open_transaction_partition(root)  # last stable offset 5, high watermark 7
    register_data_source(spark)
    assert committed_read(spark, root, startingOffsets='{"txns": {"0": 6}}') == []
