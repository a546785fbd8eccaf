"""Batch reads of a topic as a DataFrame shaped exactly like Spark's Kafka source.

Offsets options follow Spark's Kafka source (`startingOffsets` / `endingOffsets`): "earliest",
"latest", or per-partition JSON `{"topic": {"0": 23, "1": -2}}` with -2 = earliest and
-1 = latest; ending offsets are exclusive. Bounds come from the partition tables' Delta logs on
the driver (through storage_layout), data from `spark.read.format("delta")`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from pipeline.kafka_schema import kafka_schema
from pipeline.options import (
    EARLIEST,
    LATEST,
    TYPED_COLUMNS_OPTION,
    OffsetRange,
    parse_offsets,
    resolve_range,
    storage_options_option,
)
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.paths import is_local, normalize_root, partition_table_uri


def read_topic(
    spark: SparkSession,
    root: str,
    topic: str,
    *,
    starting_offsets: str | Mapping = "earliest",
    ending_offsets: str | Mapping = "latest",
    include_headers: bool = False,
    typed_columns: bool = False,
) -> DataFrame:
    """Records of `topic` in [starting_offsets, ending_offsets), as Spark's Kafka source reads them.

    Columns (exact names, types and order of Spark's Kafka source): key binary, value binary,
    topic string, partition int, offset bigint, timestamp timestamp, timestampType int, and with
    `include_headers` headers array<struct<key string, value binary>> (NULL when a record has no
    headers). Row order is not guaranteed: sort by (partition, offset) if it matters. With
    `typed_columns`, then the typed columns of keys and values with a registered schema
    (`key_schema_id`, `key_fields`, `value_schema_id`, `value_fields`: FORMAT.md §17) the topic's
    tables have.

    `starting_offsets` is "earliest" or Kafka's JSON (a string or a dict) `{"topic": {"0": 23}}`
    (-2 earliest, -1 latest; partitions not mentioned start at earliest). `ending_offsets` is
    "latest" or JSON (exclusive; -1 latest; partitions not mentioned end at latest). "latest" is
    each partition's high watermark when this function runs, and each partition is read at the
    Delta version those bounds came from, so the DataFrame is a fixed snapshot: records appended
    later never show up, however often it is evaluated.

    Raises:
        TopicNotFound: the topic does not exist under `root`.
        ValueError: malformed offsets JSON, "latest" as a starting or -2/"earliest" as an ending
            offset, or an explicit offset outside the partition's [log_start_offset,
            high_watermark] (the message names the bounds), or a start after its end.
    """
    root = normalize_root(root)
    info = TopicCatalog(root).topic(topic)
    starts = parse_offsets(starting_offsets, topic=topic, partitions=info.partitions, ending=False)
    ends = parse_offsets(ending_offsets, topic=topic, partitions=info.partitions, ending=True)
    ranges = [
        resolve_range(
            DeltaPartitionLog.open(partition_table_uri(root, topic, partition)),
            partition=partition,
            start=starts.get(partition, EARLIEST),
            end=ends.get(partition, LATEST),
            topic=topic,
        )
        for partition in range(info.partitions)
    ]
    if typed_columns or not is_local(root):
        return _through_lakelog(
            spark, root, topic, ranges, include_headers=include_headers, typed=typed_columns
        )
    frames = [_empty_frame(spark, kafka_schema(include_headers=include_headers))]
    for offsets in ranges:
        if offsets.start < offsets.end:  # empty ranges need no Spark scan at all
            uri = partition_table_uri(root, topic, offsets.partition)
            frames.append(
                _partition_frame(spark, uri, offsets, topic=topic, include_headers=include_headers)
            )
    return reduce(lambda left, right: left.union(right), frames)


def _through_lakelog(
    spark: SparkSession,
    root: str,
    topic: str,
    ranges: list[OffsetRange],
    *,
    include_headers: bool,
    typed: bool = False,
) -> DataFrame:
    """The same fixed offset ranges read through `format("lakelog")`: on an object store this
    needs no Hadoop connector (Spark's `format("delta")` would need S3A, ABFS or GCS jars and
    their credentials); lakelog's source reads the files through its own store."""
    from pipeline.source import SOURCE_NAME, register_data_source

    register_data_source(spark)
    bounds = {
        "startingOffsets": {topic: {str(r.partition): r.start for r in ranges}},
        "endingOffsets": {topic: {str(r.partition): r.end for r in ranges}},
    }
    return (
        spark.read.format(SOURCE_NAME)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps(bounds["startingOffsets"]))
        .option("endingOffsets", json.dumps(bounds["endingOffsets"]))
        .option("includeHeaders", str(include_headers).lower())
        .option(TYPED_COLUMNS_OPTION, str(typed).lower())
        .options(**storage_options_option())
        .load(root)
    )


def _empty_frame(spark: SparkSession, schema: StructType) -> DataFrame:
    """No rows, exactly `schema`. Put first in the union: a union's nullability is the OR of its
    inputs', so the result has the Kafka schema's nullable fields, not Delta's NOT NULL offset
    and timestamp. The optimizer prunes it (`WHERE false`), so it costs no scan; an empty
    `createDataFrame` would be an RDD scan with tasks."""
    nulls = [F.lit(None).cast(field.dataType).alias(field.name) for field in schema]
    return spark.range(1).select(*nulls).where(F.lit(False))


def _partition_frame(
    spark: SparkSession, uri: str, offsets: OffsetRange, *, topic: str, include_headers: bool
) -> DataFrame:
    # Pinning the Delta version the bounds were read from makes the read repeatable even if
    # retention or compaction commit meanwhile; the offset filter drops later appends and lets
    # Delta skip files by their offset statistics.
    table = spark.read.format("delta").option("versionAsOf", offsets.table_version).load(uri)
    offset = F.col("offset")
    rows = table.where((offset >= offsets.start) & (offset < offsets.end))
    if "control" in table.columns:  # transaction markers are not records (FORMAT.md §14)
        rows = rows.where(F.col("control").isNull())
    columns = [
        F.col("key"),
        F.col("value"),
        F.lit(topic).alias("topic"),
        F.lit(offsets.partition).cast("int").alias("partition"),
        offset,
        F.col("timestamp"),
        F.col("timestamp_type").cast("int").alias("timestampType"),
    ]
    if include_headers:
        # Kafka's source gives NULL, not [], for a record without headers; the storage writes
        # NULL already, this also covers an empty list written by any other tool.
        columns.append(F.when(F.size("headers") > 0, F.col("headers")).alias("headers"))
    return rows.select(*columns)
