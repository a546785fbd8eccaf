"""Admin answers that tell the truth (issue: operations, item 4): a topic config says whether
the topic set it, the cluster-wide default (LAKELOG_DEFAULT_*) or Kafka's default applies, with
its synonyms in precedence order; a config can be reset to the default; the cluster-wide
defaults reach every reader of the catalog."""

from __future__ import annotations

import httpx

from storage_layout.meta.catalog import TopicCatalog
from tests.integration.helpers import V3, assert_error, create_topic, gateway_with

KAFKA_RETENTION_MS = "604800000"


def configs_of(client: httpx.Client, topic: str) -> dict[str, dict]:
    answer = client.get(f"{V3}/topics/{topic}/configs")
    assert answer.status_code == 200, answer.text
    return {entry["name"]: entry for entry in answer.json()["data"]}


def test_a_config_says_where_its_value_comes_from(client, topic_name):
    create_topic(client, topic_name, retention_ms=1000)
    configs = configs_of(client, topic_name)
    retention = configs["retention.ms"]
    assert (retention["value"], retention["is_default"], retention["source"]) == (
        "1000",
        False,
        "DYNAMIC_TOPIC_CONFIG",
    )
    assert retention["synonyms"] == [
        {"name": "retention.ms", "value": "1000", "source": "DYNAMIC_TOPIC_CONFIG"},
        {"name": "log.retention.ms", "value": KAFKA_RETENTION_MS, "source": "DEFAULT_CONFIG"},
    ]
    segment = configs["segment.bytes"]
    assert (segment["is_default"], segment["source"]) == (True, "DEFAULT_CONFIG")
    one = client.get(f"{V3}/topics/{topic_name}/configs/retention.ms").json()
    assert one == retention


def test_a_config_is_set_and_reset_one_at_a_time(client, topic_name):
    create_topic(client, topic_name, retention_ms=1000, cleanup_policy="compact")
    path = f"{V3}/topics/{topic_name}/configs"
    assert client.put(f"{path}/segment.ms", json={"value": 60000}).status_code == 204
    assert client.delete(f"{path}/retention.ms").status_code == 204
    alter = {"data": [{"name": "cleanup.policy", "operation": "DELETE"}]}
    assert client.post(f"{path}:alter", json=alter).status_code == 204
    configs = configs_of(client, topic_name)
    assert (configs["segment.ms"]["value"], configs["segment.ms"]["is_default"]) == ("60000", False)
    assert (configs["retention.ms"]["value"], configs["retention.ms"]["source"]) == (
        KAFKA_RETENTION_MS,
        "DEFAULT_CONFIG",
    )
    assert configs["cleanup.policy"]["value"] == "delete"
    assert_error(client.delete(f"{path}/no.such.config"), 400, 40002)
    assert_error(client.put(f"{path}/retention.ms", json={"value": "soon"}), 400, 40002)


def test_cluster_wide_defaults_apply_where_a_topic_sets_none(tmp_path_factory, topic_name):
    env = {"LAKELOG_DEFAULT_RETENTION_MS": "3600000", "LAKELOG_DEFAULT_SEGMENT_BYTES": "4096"}
    with gateway_with(tmp_path_factory, "defaults", env) as process:
        with httpx.Client(base_url=process.url, timeout=30) as client:
            create_topic(client, topic_name, segment_bytes=2048)
            configs = configs_of(client, topic_name)
            retention = configs["retention.ms"]
            assert (retention["value"], retention["is_default"], retention["source"]) == (
                "3600000",
                False,
                "DYNAMIC_DEFAULT_BROKER_CONFIG",
            )
            assert [s["source"] for s in retention["synonyms"]] == [
                "DYNAMIC_DEFAULT_BROKER_CONFIG",
                "DEFAULT_CONFIG",
            ]
            segment = configs["segment.bytes"]
            assert [s["value"] for s in segment["synonyms"]] == ["2048", "4096", "1073741824"]
            assert segment["value"] == "2048"  # the topic's own setting wins
            # Another process reading the catalog (a maintenance job, Spark) resolves the same.
            config = TopicCatalog(str(process.data_dir)).topic(topic_name).config
            assert (config.retention_ms, config.segment_bytes) == (3_600_000, 2048)
