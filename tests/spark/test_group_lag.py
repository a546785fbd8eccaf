"""group_lag reads the consumer offsets Delta table with Spark: lag as a DataFrame."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from pipeline.lag import group_lag
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.meta.consumer_offsets import ConsumerOffsets, OffsetCommit
from storage_layout.paths import partition_table_uri
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig

pytestmark = pytest.mark.spark


def test_lag_is_the_high_watermark_minus_the_latest_commit(spark, tmp_path):
    root = str(tmp_path)
    TopicCatalog(root).create_topic("orders", 2, TopicConfig())
    for partition, count in ((0, 10), (1, 3)):
        log = DeltaPartitionLog.open(partition_table_uri(root, "orders", partition))
        log.append([NewRecord(None, b"x")] * count, config=TopicConfig())
    offsets = ConsumerOffsets(root)
    for group in ("billing", "audit"):
        held = offsets.take_group(group, 0, expected=None)
        offsets.commit(group, held, [OffsetCommit("orders", 0, 4)], generation=1, member_id="m")
        offsets.commit(
            group,
            held,
            [OffsetCommit("orders", 0, 6), OffsetCommit("orders", 1, 3)],
            generation=2,
            member_id="m",
        )

    lag = group_lag(spark, root, "billing").drop("committed_at")
    expected = spark.createDataFrame(
        [("billing", "orders", 0, 6, 10, 4), ("billing", "orders", 1, 3, 3, 0)],
        lag.schema,
    )
    assert_df_equality(lag, expected, ignore_row_order=True, ignore_nullable=True)
    totals = group_lag(spark, root).groupBy("group_id").agg(F.sum("lag").alias("total"))
    assert sorted((r["group_id"], r["total"]) for r in totals.collect()) == [
        ("audit", 4),
        ("billing", 4),
    ]
