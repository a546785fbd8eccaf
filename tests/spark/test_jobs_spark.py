"""Maintenance jobs with the Spark engine: one Spark task per topic partition, the same
executors as the local engine (jobs/runner.py)."""

from __future__ import annotations

import time

from jobs.runner import ENGINE_SPARK, JobRequest, run_job
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.paths import partition_table_uri
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig


def test_retention_runs_as_spark_tasks(spark, tmp_path):
    root = str(tmp_path)
    config = TopicConfig(segment_bytes=14, retention_ms=60_000)
    TopicCatalog(root).create_topic("events", 3, config)
    old_ms = int(time.time() * 1000) - 3_600_000
    for partition in range(3):
        log = DeltaPartitionLog.open(partition_table_uri(root, "events", partition))
        for i in range(3):  # segments 0, 1, 2: the first two are old and closed
            log.append([NewRecord(None, f"v{i}".encode(), timestamp_ms=old_ms)], config=config)
    lines: list[str] = []
    summary = run_job(JobRequest(job="retention", root=root, engine=ENGINE_SPARK), out=lines.append)
    assert (summary.partitions, summary.failed, summary.segments) == (3, 0, 6)
    assert any(line.startswith("[3/3]") for line in lines)  # progress per partition
    for partition in range(3):
        log = DeltaPartitionLog.open(partition_table_uri(root, "events", partition))
        assert log.snapshot.log_start_offset == 2
