"""Spark's own Kafka source (`format("kafka")`, Java's kafka-clients inside the
spark-sql-kafka-0-10 connector) reads a lakelog topic through the gateway's Kafka listener,
batch and streaming, and sees what `format("lakelog")` sees: the same records at the same
offsets. Records produced with the Java client's partitioner land where HTTP puts the keys."""

from __future__ import annotations

import base64

import httpx
import pytest

from pipeline import read_topic
from tests.kafka.test_clients import create, produce_all

pytestmark = pytest.mark.gateway

RECORDS = 60


def test_spark_kafka_source_reads_a_lakelog_topic(spark, kafka_gateway, topic_name):
    bootstrap = kafka_gateway.kafka_address
    create(bootstrap, topic_name, partitions=3)
    produce_all(
        bootstrap,
        topic_name,
        [{"key": f"k{i}".encode(), "value": f"v{i}".encode()} for i in range(RECORDS)],
        partitioner="murmur2_random",
    )

    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic_name)
        .option("startingOffsets", "earliest")
        .load()
    )
    over_kafka = {
        (row.partition, row.offset): (bytes(row.key), bytes(row.value))
        for row in frame.select("partition", "offset", "key", "value").collect()
    }

    over_lakelog = {
        (row.partition, row.offset): (bytes(row.key), bytes(row.value))
        for row in read_topic(spark, str(kafka_gateway.data_dir), topic_name).collect()
    }
    assert len(over_kafka) == RECORDS
    assert over_kafka == over_lakelog
    with httpx.Client(base_url=kafka_gateway.url) as http:  # HTTP's partitioner agrees
        keys = [key for key, _ in over_kafka.values()]
        body = {"records": [{"key": base64.b64encode(k).decode(), "value": None} for k in keys]}
        answer = http.post(
            f"/topics/{topic_name}",
            json=body,
            headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
        ).json()
    assert [o["partition"] for o in answer["offsets"]] == [p for p, _ in over_kafka]


def test_spark_kafka_stream_reads_every_record_once(spark, kafka_gateway, topic_name, tmp_path):
    bootstrap = kafka_gateway.kafka_address
    create(bootstrap, topic_name, partitions=2)
    produce_all(bootstrap, topic_name, [{"value": f"s{i}".encode()} for i in range(RECORDS)])
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic_name)
        .option("startingOffsets", "earliest")
        .load()
    )
    query = (
        stream.selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
        .writeStream.format("memory")
        .queryName(topic_name.replace("-", "_"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    rows = spark.sql(f"SELECT * FROM {topic_name.replace('-', '_')}").collect()
    assert sorted(row.value for row in rows) == sorted(f"s{i}" for i in range(RECORDS))
    assert len({(row.partition, row.offset) for row in rows}) == RECORDS
