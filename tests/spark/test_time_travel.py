"""Delta history as a topic setting (issue: operations, item 5): a partition table keeps
`delta.log.retention.ms` of versions, so Spark's Delta time travel reads a kept version, while
housekeeping still trims what is older (the directory stays small)."""

from __future__ import annotations

import os

import pytest
from pyspark.sql.utils import AnalysisException

from storage_layout.log import CHECKPOINT_INTERVAL, DeltaPartitionLog, housekeeping, log_commit
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig

CONFIG = TopicConfig()


def busy_table(uri: str, history_ms: int) -> DeltaPartitionLog:
    """Three checkpoints' worth of one-record appends, with housekeeping as the writer runs it."""
    DeltaPartitionLog.create(uri)
    log = DeltaPartitionLog.open(uri)
    for index in range(3 * CHECKPOINT_INTERVAL + 5):
        log.append([NewRecord(None, b"v%d" % index)], config=CONFIG)
        if index % 50 == 49:
            log.housekeeping(history_ms)
            log.catch_up()
    return log


def commits_in(uri: str) -> list[int]:
    names = os.listdir(os.path.join(uri, log_commit.LOG_DIR))
    return sorted(int(n.split(".")[0]) for n in names if n.endswith(".json"))


def test_spark_travels_to_a_version_the_history_keeps(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(housekeeping, "LOG_GRACE_MS", 0)
    uri = str(tmp_path / "kept" / "0")
    busy_table(uri, history_ms=3_600_000)
    assert commits_in(uri)[0] == 0  # an hour of history: nothing old enough to trim
    old = spark.read.format("delta").option("versionAsOf", 3).load(uri)
    assert sorted(r.value for r in old.select("value").collect()) == [b"v0", b"v1", b"v2"]


def test_without_history_old_versions_are_trimmed(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(housekeeping, "LOG_GRACE_MS", 0)
    uri = str(tmp_path / "trimmed" / "0")
    log = busy_table(uri, history_ms=0)
    assert commits_in(uri)[0] >= CHECKPOINT_INTERVAL  # below the previous checkpoint: gone
    with pytest.raises(AnalysisException):
        spark.read.format("delta").option("versionAsOf", 3).load(uri).collect()
    latest = spark.read.format("delta").load(uri)
    assert latest.count() == log.snapshot.high_watermark


def test_the_history_is_a_topic_config():
    config = TopicConfig.from_mapping({"delta.log.retention.ms": "86400000"})
    assert config.delta_log_retention_ms == 86_400_000
    assert TopicConfig().delta_log_retention_ms == 3_600_000
