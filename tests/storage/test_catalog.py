"""The topic catalog (`_meta/topics`) on a real Delta table: lifecycle and races."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from storage_layout import paths
from storage_layout.errors import InvalidPartitions, InvalidTopic, TopicExists, TopicNotFound
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.meta.table import META_FILES_MAX
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig


def test_create_list_alter_delete(tmp_path):
    """A topic goes through create, config change, partition growth and deletion."""
    catalog = TopicCatalog(str(tmp_path))
    config = TopicConfig.from_mapping({"retention.ms": "1000"})
    created = catalog.create_topic("orders", 2, config)
    assert catalog.topic("orders") == created
    altered = catalog.alter_topic(
        "orders", partitions=3, config=TopicConfig.from_mapping({"cleanup.policy": "compact"})
    )
    assert (altered.partitions, altered.config.cleanup_policy, altered.version) == (3, "compact", 2)
    assert DeltaPartitionLog.open(paths.partition_table_uri(str(tmp_path), "orders", 2))
    with pytest.raises(InvalidPartitions, match="only grow"):
        catalog.alter_topic("orders", partitions=1)
    catalog.delete_topic("orders")
    assert catalog.topics() == {}
    with pytest.raises(TopicNotFound):
        catalog.topic("orders")
    assert not (tmp_path / "topics" / "orders").exists()


def test_recreated_topic_starts_empty(tmp_path):
    """A topic created again after deletion starts at offset 0 (no leftover data)."""
    catalog = TopicCatalog(str(tmp_path))
    catalog.create_topic("t", 1, TopicConfig())
    uri = paths.partition_table_uri(str(tmp_path), "t", 0)
    DeltaPartitionLog.open(uri).append([NewRecord(None, b"x")], config=TopicConfig())
    catalog.delete_topic("t")
    catalog.create_topic("t", 1, TopicConfig())
    assert DeltaPartitionLog.open(uri).bounds().high_watermark == 0


def test_two_catalogs_racing_to_create_one_topic(tmp_path):
    """Two nodes creating the same topic from the same snapshot: exactly one wins."""
    first, second = TopicCatalog(str(tmp_path)), TopicCatalog(str(tmp_path))
    first.topics(), second.topics()
    first.create_topic("race", 1, TopicConfig())
    with pytest.raises(TopicExists):
        second.create_topic("race", 4, TopicConfig())
    assert TopicCatalog(str(tmp_path)).topic("race").partitions == 1


def test_bad_names_and_counts_are_rejected(tmp_path):
    """Kafka's naming rules and a sane partition count are checked before anything is written."""
    catalog = TopicCatalog(str(tmp_path))
    for name in ("", ".", "..", "a/b", "a b", "x" * 250, "ü"):
        with pytest.raises(InvalidTopic):
            catalog.create_topic(name, 1, TopicConfig())
    with pytest.raises(InvalidPartitions):
        catalog.create_topic("zero", 0, TopicConfig())
    assert catalog.topics() == {}


def test_catalog_stays_a_few_files(tmp_path):
    """Every change adds a file; compaction keeps the catalog small without losing a topic."""
    catalog = TopicCatalog(str(tmp_path))
    for index in range(40):
        catalog.create_topic(f"t{index}", 1, TopicConfig())
    files = pa.table(DeltaTable(paths.meta_table_uri(str(tmp_path), "topics")).get_add_actions())
    assert files.num_rows <= META_FILES_MAX + 1
    assert sorted(TopicCatalog(str(tmp_path)).topics()) == sorted(f"t{i}" for i in range(40))


def test_a_topic_stores_only_its_own_configs_and_reads_older_rows(tmp_path):
    """New rows hold the topic's own settings; rows written before cluster-wide defaults hold
    every setting, and those equal to Kafka's defaults then count as unset."""
    import json
    import time

    from deltalake import write_deltalake

    from storage_layout.meta.catalog import CATALOG_SCHEMA
    from storage_layout.meta.topic_defaults import write_topic_defaults

    root = str(tmp_path / "root")
    catalog = TopicCatalog(root)
    catalog.create_topic("own", 1, overrides={"retention.ms": "604800000"})  # = Kafka's
    legacy = TopicConfig(segment_bytes=4096).to_mapping()  # every setting, flat
    row = {
        "name": ["old"],
        "version": [1],
        "topic_id": ["x"],
        "partitions": [1],
        "config": [json.dumps(legacy)],
        "state": ["active"],
        "updated_at": [int(time.time() * 1_000_000)],
    }
    # Written by delta-rs, as by the code before the catalog committed through the store.
    catalog_uri = paths.meta_table_uri(root, "topics")
    write_deltalake(catalog_uri, pa.table(row, schema=CATALOG_SCHEMA), mode="append")
    write_topic_defaults(root, {"retention.ms": 1000, "segment.bytes": 8192})
    topics = TopicCatalog(root).topics()
    assert topics["own"].overrides == {"retention.ms": "604800000"}
    assert topics["own"].config.retention_ms == 604_800_000  # set explicitly: not the default
    assert topics["own"].config.segment_bytes == 8192
    assert topics["old"].overrides == {"segment.bytes": "4096"}
    assert topics["old"].config.retention_ms == 1000  # unset in the old row: the default
