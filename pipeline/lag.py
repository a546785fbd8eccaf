"""Consumer group lag as a DataFrame: the `_meta/consumer_offsets` Delta table, read by Spark,
next to each partition's log end.

Committed offsets come straight from the commit table (latest row per group, topic and
partition by `commit_sequence`, the order the group's coordinators committed in). The log end
is the last stable offset (the high watermark unless a transaction is open: its records are not
there to consume yet, as Confluent's lag counts it), from the partition tables' Delta logs on
the driver (no data scan unless the partition has transactions).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.paths import meta_table_uri, normalize_root, partition_table_uri

LAG_COLUMNS = (
    "group_id",
    "topic",
    "partition",
    "committed_offset",
    "log_end_offset",
    "lag",
    "committed_at",
)
_ENDS_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("log_end_offset", LongType(), False),
    ]
)


def committed_offsets(spark: SparkSession, root: str, group_id: str | None = None) -> DataFrame:
    """The latest committed offset per (group_id, topic, partition), from the commit table."""
    table = spark.read.format("delta").load(
        meta_table_uri(normalize_root(root), "consumer_offsets")
    )
    if group_id is not None:
        table = table.where(F.col("group_id") == group_id)
    latest = Window.partitionBy("group_id", "topic", "partition").orderBy(
        F.col("commit_sequence").desc()
    )
    return table.withColumn("_rank", F.row_number().over(latest)).where("_rank = 1").drop("_rank")


def group_lag(spark: SparkSession, root: str, group_id: str | None = None) -> DataFrame:
    """Lag per (group_id, topic, partition): last stable offset minus committed offset
    (never negative). Partitions of deleted topics are left out.

    Columns: group_id, topic, partition, committed_offset, log_end_offset, lag, committed_at.
    """
    root = normalize_root(root)
    committed = committed_offsets(spark, root, group_id)
    keys = committed.select("topic", "partition").distinct().collect()
    ends = spark.createDataFrame(_log_end_offsets(root, keys), _ENDS_SCHEMA)
    return committed.join(ends, ["topic", "partition"]).select(
        "group_id",
        "topic",
        "partition",
        F.col("offset").alias("committed_offset"),
        "log_end_offset",
        F.greatest(F.lit(0).cast("long"), F.col("log_end_offset") - F.col("offset")).alias("lag"),
        "committed_at",
    )


def _log_end_offsets(root: str, keys) -> list[tuple[str, int, int]]:
    topics = TopicCatalog(root).topics()
    ends = []
    for row in keys:
        info = topics.get(row["topic"])
        if info is None or row["partition"] >= info.partitions:
            continue
        log = DeltaPartitionLog.open(partition_table_uri(root, row["topic"], row["partition"]))
        ends.append((row["topic"], row["partition"], log.stable_bounds().last_stable_offset))
    return ends
