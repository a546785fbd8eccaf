"""The schema of Spark's Kafka source, which every lakelog read of a topic has exactly."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type
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

from storage_layout.schemas.typed_columns import TYPED_COLUMNS

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


def kafka_schema(
    *, include_headers: bool, typed: Mapping[str, pa.DataType] | None = None
) -> StructType:
    """Spark's Kafka source schema, with the `headers` column only when `include_headers`, and
    after it the typed columns `typed` (FORMAT.md §17) when given."""
    schema = KAFKA_SCHEMA_WITH_HEADERS if include_headers else KAFKA_SCHEMA
    if not typed:
        return schema
    extra = [StructField(name, from_arrow_type(kind)) for name, kind in typed.items()]
    return StructType([*schema.fields, *extra])


def typed_arrow_types(schema: StructType) -> dict[str, pa.DataType]:
    """The typed columns of a read's schema (Spark's types), as the Arrow types its batches
    carry."""
    return {
        field.name: to_arrow_type(field.dataType, timezone="UTC")
        for field in schema.fields
        if field.name in TYPED_COLUMNS
    }
