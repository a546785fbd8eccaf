"""The short forms in pipeline/topics.py: write a topic, stream it into another, read it back;
and the `pyspark_lakelog` module Spark uses to register format("lakelog") on its own."""

from __future__ import annotations

import pkgutil

from chispa import assert_df_equality
from pyspark.sql import functions as F

import pyspark_lakelog
from pipeline.read import read_topic
from pipeline.source import LakelogDataSource
from pipeline.topics import read_topic_stream, write_topic, write_topic_stream
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.topic_config import TopicConfig


def test_write_then_stream_into_another_topic(spark, tmp_path):
    root = str(tmp_path / "lakelog")
    catalog = TopicCatalog(root)
    catalog.create_topic("raw", 2, TopicConfig())
    catalog.create_topic("upper", 2, TopicConfig())
    frame = spark.createDataFrame(
        [(f"k{i}", f"v{i}") for i in range(20)], "key string, value string"
    )
    write_topic(frame, root, "raw")

    stream = read_topic_stream(spark, root, "raw", starting_offsets="earliest")
    upper = stream.select("key", F.upper(F.col("value").cast("string")).alias("value"))
    query = (
        write_topic_stream(upper, root, "upper", checkpoint_location=str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    got = read_topic(spark, root, "upper").select("key", "value", "partition")
    expected = read_topic(spark, root, "raw").select(
        "key", F.upper(F.col("value").cast("string")).cast("binary").alias("value"), "partition"
    )  # same keys, so the same partitions
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_spark_finds_the_data_source_by_module_name():
    names = {module.name for module in pkgutil.iter_modules()}
    assert "pyspark_lakelog" in names  # Spark's lookup: top-level modules named pyspark_*
    assert pyspark_lakelog.DefaultSource is LakelogDataSource
    assert LakelogDataSource.name() == "lakelog"
