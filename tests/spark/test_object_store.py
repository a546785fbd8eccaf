"""Spark on an S3 root (moto): `format("lakelog")` reads and writes and a maintenance job with
the Spark engine, with no Hadoop S3 connector: lakelog's data source reads and commits through
its own store. The credentials reach the executors as explicit storage options, shipped with
each task (the Spark session started before the test set any AWS variable)."""

from __future__ import annotations

import time

import pytest
from pyspark.sql import functions as F

from jobs.runner import ENGINE_SPARK, JobRequest, run_job
from pipeline.read import read_topic
from pipeline.source import register_data_source
from pipeline.topics import write_topic
from storage_layout import store
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.paths import partition_table_uri
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig


@pytest.fixture
def s3_spark_root(spark, s3_server, s3_root):
    """An S3 root whose endpoint and keys are explicit storage options (as
    LAKELOG_STORAGE_OPTIONS sets them), so executors get them with their tasks."""
    env = s3_server.env
    store.configure(
        {
            "aws_endpoint": env["AWS_ENDPOINT_URL"],
            "aws_region": env["AWS_REGION"],
            "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
            "allow_http": "true",
        }
    )
    register_data_source(spark)
    yield s3_root
    store.configure({})


def test_spark_writes_reads_and_runs_retention_on_s3(spark, s3_spark_root):
    root = s3_spark_root
    config = TopicConfig(segment_bytes=14, retention_ms=60_000)
    TopicCatalog(root).create_topic("clicks", 2, config)
    old_ms = int(time.time() * 1000) - 3_600_000
    for partition in range(2):  # three old one-record segments (segment.bytes=14)
        log = DeltaPartitionLog.open(partition_table_uri(root, "clicks", partition))
        for i in range(3):
            log.append([NewRecord(None, f"old{i}".encode(), timestamp_ms=old_ms)], config=config)
    rows = [(f"k{i}", f"v{i}") for i in range(20)]
    frame = spark.createDataFrame(rows, "key string, value string")
    write_topic(frame, root, "clicks")  # adds the storageOptions option to the write

    written = read_topic(spark, root, "clicks")
    assert written.count() == 26
    values = {r.value for r in written.select(F.col("value").cast("string")).collect()}
    assert {f"v{i}" for i in range(20)} <= values

    summary = run_job(JobRequest(job="retention", root=root, engine=ENGINE_SPARK), out=print)
    assert (summary.partitions, summary.failed) == (2, 0)
    assert summary.records_removed == 6  # the old records' segments, closed by the write
    after = read_topic(spark, root, "clicks")
    kept = {r.value for r in after.select(F.col("value").cast("string")).collect()}
    assert kept == {f"v{i}" for i in range(20)}
