"""`spark.read.format("lakelog")` (pipeline/source.py) with Spark's Kafka source options,
checked against read_topic and against the records appended."""

from __future__ import annotations

import json

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from pipeline import splits as split_planning
from pipeline.read import read_topic
from pipeline.source import LakelogBatchReader, register_data_source
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.paths import partition_table_uri
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    """Topics orders (2 partitions, 3 appends of 2 records each), audit (1), empty (1)."""
    path = str(tmp_path_factory.mktemp("lakelog"))
    catalog = TopicCatalog(path)
    for name, partitions in (("orders", 2), ("audit", 1), ("empty", 1)):
        catalog.create_topic(name, partitions, TopicConfig())
    for name, partitions in (("orders", 2), ("audit", 1)):
        for partition in range(partitions):
            log = DeltaPartitionLog.open(partition_table_uri(path, name, partition))
            for batch in range(3):
                log.append(
                    [
                        NewRecord(b"k", f"{name}-{partition}-{batch}-{i}".encode(), headers=h)
                        for i, h in enumerate(((), (("trace", b"t1"),)))
                    ],
                    config=TopicConfig(),
                )
    return path


@pytest.fixture(scope="module")
def lakelog(spark):
    register_data_source(spark)
    return spark


def test_subscribe_reads_what_read_topic_reads(lakelog, root):
    frame = (
        lakelog.read.format("lakelog")
        .option("subscribe", "orders")
        .option("includeHeaders", "true")
        .load(root)
    )
    expected = read_topic(lakelog, root, "orders", include_headers=True)
    assert_df_equality(frame, expected, ignore_row_order=True)
    assert frame.count() == 12


def test_assign_with_offsets_json(lakelog, root):
    frame = (
        lakelog.read.format("lakelog")
        .option("assign", json.dumps({"orders": [1]}))
        .option("startingOffsets", json.dumps({"orders": {"1": 2}}))
        .option("endingOffsets", json.dumps({"orders": {"1": 5}}))
        .option("path", root)
        .load()
    )
    rows = frame.select("partition", "offset").collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(1, 2), (1, 3), (1, 4)]
    assert "headers" not in frame.columns


def test_subscribe_pattern_and_empty_topics(lakelog, root):
    frame = lakelog.read.format("lakelog").option("subscribePattern", "a.*|e.*").load(root)
    topics = sorted({r.topic for r in frame.collect()})
    assert topics == ["audit"]  # "empty" matches but has no records
    empty = lakelog.read.format("lakelog").option("subscribe", "empty").load(root)
    assert empty.count() == 0
    assert empty.schema == read_topic(lakelog, root, "empty").schema


def test_exactly_one_topic_option_is_required(lakelog, root):
    reader = LakelogBatchReader({"path": root, "subscribe": "orders", "assign": "{}"})
    with pytest.raises(ValueError, match="Exactly one"):
        reader.partitions()
    with pytest.raises(ValueError, match="storage root"):
        LakelogBatchReader({"subscribe": "orders"}).partitions()


def test_large_ranges_are_split_for_parallel_reads(root, monkeypatch):
    monkeypatch.setattr(split_planning, "RECORDS_PER_SPLIT", 2)
    splits = LakelogBatchReader({"path": root, "subscribe": "orders"}).partitions()
    assert len(splits) == 6  # 3 files of 2 records per partition, 2 partitions
    assert {(s.partition, len(s.files)) for s in splits} == {(0, 1), (1, 1)}


def test_timestamp_options(lakelog, tmp_path):
    """startingTimestamp / endingOffsetsByTimestamp pick the first offset at or after the time
    (CreateTime records out of order included)."""
    root = str(tmp_path)
    TopicCatalog(root).create_topic("clicks", 1, TopicConfig())
    log = DeltaPartitionLog.open(partition_table_uri(root, "clicks", 0))
    for stamp in (1_000, 5_000, 3_000, 7_000, 9_000):
        log.append([NewRecord(None, str(stamp).encode(), stamp)], config=TopicConfig())
    frame = (
        lakelog.read.format("lakelog")
        .option("subscribe", "clicks")
        .option("startingTimestamp", "4000")
        .option("endingOffsetsByTimestamp", json.dumps({"clicks": {"0": 8000}}))
        .load(root)
    )
    assert sorted(r.offset for r in frame.collect()) == [1, 2, 3]
    late = lakelog.read.format("lakelog").option("subscribe", "clicks")
    with pytest.raises(Exception, match="No record"):
        late.option("startingTimestamp", "99999").load(root).collect()


def test_fail_on_data_loss_below_log_start(lakelog, tmp_path):
    """A starting offset that retention deleted: an error by default, the log start with
    failOnDataLoss=false."""
    root = str(tmp_path)
    TopicCatalog(root).create_topic("trimmed", 1, TopicConfig())
    uri = partition_table_uri(root, "trimmed", 0)
    log = DeltaPartitionLog.open(uri)
    config = TopicConfig.from_mapping({"segment.bytes": "100"})
    for batch in range(3):
        log.append([NewRecord(None, f"{batch}-{i}".encode()) for i in range(4)], config=config)
    DeltaTable(uri).delete("segment = 0")
    start = json.dumps({"trimmed": {"0": 1}})
    reader = lakelog.read.format("lakelog").option("subscribe", "trimmed")
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader.option("startingOffsets", start).load(root).collect()
    lenient = reader.option("startingOffsets", start).option("failOnDataLoss", "false")
    assert sorted(r.offset for r in lenient.load(root).collect()) == list(range(4, 12))
