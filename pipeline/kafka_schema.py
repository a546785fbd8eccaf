"""The schema of Spark's Kafka source, which every lakelog read of a topic has exactly."""

from __future__ import annotations

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

# Spark's Kafka source schema (KafkaRecordToRowConverter): every field nullable, this order.
KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
KAFKA_HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
KAFKA_SCHEMA_WITH_HEADERS = StructType(
    [*KAFKA_SCHEMA.fields, StructField("headers", KAFKA_HEADERS_TYPE)]
)


def kafka_schema(*, include_headers: bool) -> StructType:
    """Spark's Kafka source schema, with the `headers` column only when `include_headers`."""
    return KAFKA_SCHEMA_WITH_HEADERS if include_headers else KAFKA_SCHEMA
