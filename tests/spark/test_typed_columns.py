"""Spark reads a typed topic's partition table as plain Delta (FORMAT.md §17): the typed
columns are there, with no lakelog code, across schema versions."""

from __future__ import annotations

import json

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from storage_layout.paths import partition_table_uri
from tests.kafka.test_clients import create, produce_all

V1 = json.dumps(
    {
        "type": "record",
        "name": "Sale",
        "namespace": "acme",
        "fields": [{"name": "store", "type": "string"}, {"name": "amount", "type": "double"}],
    }
)
V2 = json.dumps(
    {
        "type": "record",
        "name": "Sale",
        "namespace": "acme",
        "fields": [
            {"name": "store", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "coupon", "type": ["null", "string"], "default": None},
        ],
    }
)


def test_spark_sql_on_typed_fields(spark, kafka_gateway, topic_name):
    bootstrap = kafka_gateway.kafka_address
    registry = SchemaRegistryClient({"url": kafka_gateway.url})
    create(bootstrap, topic_name)
    context = SerializationContext(topic_name, MessageField.VALUE)
    old, new = AvroSerializer(registry, V1), AvroSerializer(registry, V2)
    records = [
        {"value": old({"store": f"s{i % 2}", "amount": 10.0 * i}, context)} for i in range(4)
    ]
    records.append({"value": new({"store": "s1", "amount": 5.0, "coupon": "C10"}, context)})
    produce_all(bootstrap, topic_name, records)

    path = partition_table_uri(kafka_gateway.root, topic_name, 0)
    spark.read.format("delta").load(path).createOrReplaceTempView("sales")
    totals = spark.sql(
        "SELECT value_fields.store AS store, sum(value_fields.amount) AS total, "
        "count(value_fields.coupon) AS coupons FROM sales GROUP BY 1 ORDER BY 1"
    ).collect()
    assert [(r.store, r.total, r.coupons) for r in totals] == [("s0", 20.0, 0), ("s1", 45.0, 1)]
    field_type = spark.table("sales").schema["value_fields"].dataType
    assert [f.name for f in field_type.fields] == ["store", "amount", "coupon"]


def test_format_lakelog_and_views_return_typed_columns(spark, kafka_gateway, topic_name):
    from pipeline.read import read_topic
    from pipeline.views import latest_by_key

    bootstrap = kafka_gateway.kafka_address
    registry = SchemaRegistryClient({"url": kafka_gateway.url})
    create(bootstrap, topic_name)
    context = SerializationContext(topic_name, MessageField.VALUE)
    old, new = AvroSerializer(registry, V1), AvroSerializer(registry, V2)
    records = [
        {"key": b"a", "value": old({"store": "s0", "amount": 1.0}, context)},
        {"key": b"b", "value": b"untyped"},
        {"key": b"a", "value": new({"store": "s1", "amount": 2.0, "coupon": "C"}, context)},
    ]
    produce_all(bootstrap, topic_name, records)
    root = kafka_gateway.root

    plain = spark.read.format("lakelog").option("subscribe", topic_name).load(root)
    assert "value_fields" not in plain.columns  # the default keeps Spark's Kafka schema
    typed = (
        spark.read.format("lakelog")
        .option("subscribe", topic_name)
        .option("typedColumns", "true")
        .load(root)
    )
    rows = typed.orderBy("offset").select("offset", "value_fields.store", "value_fields.coupon")
    assert [tuple(r) for r in rows.collect()] == [(0, "s0", None), (1, None, None), (2, "s1", "C")]

    latest = latest_by_key(spark, root, topic_name).orderBy("key")
    assert [r.value_fields.store if r.value_fields else None for r in latest.collect()] == [
        "s1",
        None,
    ]
    batch = read_topic(spark, root, topic_name, typed_columns=True)
    assert batch.where("value_schema_id IS NOT NULL").count() == 2

    stream = (
        spark.readStream.format("lakelog")
        .option("subscribe", topic_name)
        .option("typedColumns", "true")
        .option("startingOffsets", "earliest")
        .load(root)
    )
    query = (
        stream.writeStream.format("memory")
        .queryName("typed_stream")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    streamed = spark.sql("SELECT value_fields.amount FROM typed_stream ORDER BY offset").collect()
    assert [r.amount for r in streamed] == [1.0, None, 2.0]


def test_spark_writes_structs_with_the_topics_schema(spark, kafka_gateway, topic_name):
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    from tests.kafka.test_clients import consume

    bootstrap = kafka_gateway.kafka_address
    registry = SchemaRegistryClient({"url": kafka_gateway.url})
    create(bootstrap, topic_name)
    from confluent_kafka.schema_registry import Schema

    registry.register_schema(f"{topic_name}-value", Schema(V2, "AVRO"))
    frame = spark.createDataFrame(
        [("s1", 3.5, None), ("s2", 4.0, "C1")], "store string, amount double, coupon string"
    ).selectExpr("struct(store, amount, coupon) AS value")
    frame.write.format("lakelog").mode("append").option("topic", topic_name).save(
        kafka_gateway.root
    )

    deserialize = AvroDeserializer(registry)
    context = SerializationContext(topic_name, MessageField.VALUE)
    read = [deserialize(m.value(), context) for m in consume(bootstrap, topic_name, [0], 2)]
    assert sorted(read, key=lambda v: v["store"]) == [
        {"store": "s1", "amount": 3.5, "coupon": None},
        {"store": "s2", "amount": 4.0, "coupon": "C1"},
    ]
    typed = spark.read.format("delta").load(partition_table_uri(kafka_gateway.root, topic_name, 0))
    assert typed.where("value_fields.coupon = 'C1'").count() == 1
