"""Writes into topics with `format("lakelog")` (pipeline/write.py): placement as the gateway
places records, every Kafka sink column, clear errors, exactly-once reruns of a micro-batch, and
Spark writes interleaved with HTTP produce on a live gateway."""

from __future__ import annotations

import datetime as dt
import threading

import httpx
import pytest
from chispa import assert_df_equality
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.sql.utils import AnalysisException

from pipeline.read import read_topic
from pipeline.source import register_data_source
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.partitioner import partition_for_key
from storage_layout.topic_config import TopicConfig
from tests.integration.helpers import b64, create_topic, produce


@pytest.fixture(scope="module")
def lakelog(spark):
    register_data_source(spark)
    return spark


@pytest.fixture
def root(tmp_path) -> str:
    return str(tmp_path / "lakelog")


def make_topic(root: str, name: str, partitions: int = 1) -> None:
    TopicCatalog(root).create_topic(name, partitions, TopicConfig())


def test_keys_land_where_a_java_producer_puts_them(lakelog, root):
    make_topic(root, "orders", partitions=4)
    rows = [(f"key-{i}", f"value-{i}") for i in range(60)]
    frame = lakelog.createDataFrame(rows, "key string, value string")
    frame.write.format("lakelog").option("topic", "orders").mode("append").save(root)
    written = read_topic(lakelog, root, "orders").select("key", "value", "partition")
    expected = lakelog.createDataFrame(
        [(k.encode(), v.encode(), partition_for_key(k.encode(), 4)) for k, v in rows],
        "key binary, value binary, partition int",
    )
    assert_df_equality(written, expected, ignore_row_order=True, ignore_nullable=True)
    offsets = (
        read_topic(lakelog, root, "orders")
        .groupBy("partition")
        .agg(F.min("offset").alias("low"), F.max("offset").alias("high"), F.count("*").alias("n"))
    )
    assert all(r.low == 0 and r.high == r.n - 1 for r in offsets.collect())  # dense from 0


def test_every_sink_column(lakelog, root):
    make_topic(root, "a", partitions=2)
    make_topic(root, "b")
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    frame = lakelog.createDataFrame(
        [
            ("a", 1, b"k1", b"v1", [("trace", b"t1")], when),
            ("b", None, None, None, None, None),  # a keyless tombstone, no headers
        ],
        "topic string, partition int, key binary, value binary, "
        "headers array<struct<key string, value binary>>, timestamp timestamp",
    )
    frame.write.format("lakelog").mode("append").save(root)
    first = read_topic(lakelog, root, "a", include_headers=True).collect()
    assert [(r.partition, r.key, r.value, r.timestampType) for r in first] == [
        (1, b"k1", b"v1", 0)  # CreateTime
    ]
    assert first[0].timestamp.astimezone(dt.UTC) == when
    assert [(h.key, h.value) for h in first[0].headers] == [("trace", b"t1")]
    second = read_topic(lakelog, root, "b", include_headers=True).collect()
    assert [(r.key, r.value, r.headers, r.timestampType) for r in second] == [(None, None, None, 0)]


@pytest.mark.parametrize(
    ("columns", "options", "message"),
    [
        ("key string", {"topic": "t"}, "'value' column"),
        ("value string, extra int", {"topic": "t"}, r"\['extra'\] are not written"),
        ("value int", {"topic": "t"}, "Column 'value' is int"),
        ("value string", {}, "Name the topic"),
    ],
)
def test_bad_frames_are_refused_before_any_task(lakelog, root, columns, options, message):
    make_topic(root, "t")
    frame = lakelog.createDataFrame([], columns)
    with pytest.raises((AnalysisException, PySparkException), match=message):
        frame.write.format("lakelog").options(**options).mode("append").save(root)


def test_overwrite_is_refused(lakelog, root):
    make_topic(root, "t")
    frame = lakelog.createDataFrame([("v",)], "value string")
    with pytest.raises((AnalysisException, PySparkException), match="append-only"):
        frame.write.format("lakelog").option("topic", "t").mode("overwrite").save(root)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (("t", 5, "v"), "Partition 5 does not exist"),
        (("nope", None, "v"), "nope"),
        (("t", None, "x" * 2_000_000), "max.message.bytes"),
    ],
)
def test_bad_rows_fail_the_write_with_the_reason(lakelog, root, row, message):
    make_topic(root, "t")
    frame = lakelog.createDataFrame([row], "topic string, partition int, value string")
    with pytest.raises(Exception, match=message):
        frame.write.format("lakelog").mode("append").save(root)
    assert read_topic(lakelog, root, "t").count() == 0


def test_a_rerun_micro_batch_appends_nothing_twice(lakelog, root, tmp_path):
    """Crash after the sink's commits but before Spark marked the batch done: the restarted
    query reruns that batch (same id, same rows); the chunks' txns make it a no-op."""
    make_topic(root, "out", partitions=2)
    source = str(tmp_path / "source")
    for start in (0, 50, 100):
        rows = lakelog.range(start, start + 50).select(F.col("id").cast("string").alias("value"))
        rows.write.format("delta").mode("append").save(source)
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        stream = lakelog.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)
        query = (
            stream.writeStream.format("lakelog")
            .option("topic", "out")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start(root)
        )
        query.awaitTermination()
        assert query.exception() is None

    run()
    assert read_topic(lakelog, root, "out").count() == 150
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):  # "crashed" before the batch commit
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    run()  # reruns batch `last`
    values = [r.value for r in read_topic(lakelog, root, "out").select("value").collect()]
    assert sorted(values) == sorted(str(i).encode() for i in range(150))


@pytest.mark.parametrize("routing", ["auto", "direct"])
def test_spark_writes_interleaved_with_http_produce(lakelog, gateway, routing):
    """Offsets stay dense and unique; every record is there once; no produce fails."""
    root = str(gateway.data_dir)
    topic = f"spark-and-http-{routing}"
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        create_topic(client, topic, partitions=2)
        assert produce(client, topic, [{"value": b64("first")}], partition=0).status_code == 200
        failures: list[str] = []

        def http_producer() -> None:
            for i in range(30):
                answer = produce(client, topic, [{"value": b64(f"http-{i}")}], partition=i % 2)
                if answer.status_code != 200:
                    failures.append(answer.text)

        thread = threading.Thread(target=http_producer)
        thread.start()
        for batch in range(3):
            frame = lakelog.range(200).select(
                F.concat(F.lit(f"spark-{batch}-"), F.col("id").cast("string")).alias("value")
            )
            frame.write.format("lakelog").option("topic", topic).option(
                "leaderRouting", routing
            ).mode("append").save(root)
        thread.join()
    assert failures == []
    rows = read_topic(lakelog, root, topic).select("partition", "offset", "value").collect()
    for partition in (0, 1):
        offsets = sorted(r.offset for r in rows if r.partition == partition)
        assert offsets == list(range(len(offsets)))
    expected = {b"first"} | {f"http-{i}".encode() for i in range(30)}
    expected |= {f"spark-{b}-{i}".encode() for b in range(3) for i in range(200)}
    values = [r.value for r in rows]
    assert len(values) == len(expected) and set(values) == expected


def test_root_is_required(lakelog):
    frame = lakelog.createDataFrame([("v",)], "value string")
    with pytest.raises((AnalysisException, PySparkException), match="storage root"):
        frame.write.format("lakelog").option("topic", "t").mode("append").save()
