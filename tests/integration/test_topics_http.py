"""Topic admin over HTTP: v3 clusters/topics/configs and v2 topic, partition and broker metadata."""

from __future__ import annotations

import pytest

from tests.integration.helpers import V3, assert_error, create_topic, produce

pytestmark = pytest.mark.gateway


def _create(client, name, partitions=1, configs=(), **extra):
    body = {"topic_name": name, "partitions_count": partitions, "configs": list(configs), **extra}
    return client.post(f"{V3}/topics", json=body)


# ---- v3 clusters -------------------------------------------------------------------------------


def test_clusters_lists_one_cluster_named_lakelog(client):
    """GET /v3/clusters lists exactly one cluster, `lakelog`, which is also readable by id."""
    response = client.get("/v3/clusters")
    assert response.status_code == 200
    body = response.json()
    assert body["kind"] == "KafkaClusterList"
    assert [c["cluster_id"] for c in body["data"]] == ["lakelog"]
    one = client.get(f"{V3}")
    assert one.status_code == 200 and one.json()["cluster_id"] == "lakelog"


def test_unknown_cluster_is_404(client):
    """Any other cluster id is 404 with an error body, for the cluster and its topics."""
    assert_error(client.get("/v3/clusters/other"), 404, 404)
    assert_error(client.get("/v3/clusters/other/topics"), 404, 404)


# ---- v3 create / get / list ------------------------------------------------------------------


def test_create_topic_201_then_get_shows_partitions_and_configs(client, topic_name):
    """Create answers 201 with the topic; GET and the configs list show partitions and configs."""
    configs = [
        {"name": "retention.ms", "value": "60000"},
        {"name": "cleanup.policy", "value": "compact"},
    ]
    response = _create(client, topic_name, 3, configs)
    assert response.status_code == 201, response.text
    created = response.json()
    assert created["kind"] == "KafkaTopic"
    assert created["topic_name"] == topic_name and created["partitions_count"] == 3
    got = client.get(f"{V3}/topics/{topic_name}").json()
    assert got["partitions_count"] == 3 and got["cluster_id"] == "lakelog"
    listed = client.get(f"{V3}/topics/{topic_name}/configs").json()
    values = {entry["name"]: entry["value"] for entry in listed["data"]}
    assert values["retention.ms"] == "60000" and values["cleanup.policy"] == "compact"
    partitions = client.get(f"{V3}/topics/{topic_name}/partitions").json()["data"]
    assert [p["partition_id"] for p in partitions] == [0, 1, 2]


def test_list_topics_includes_new_topic(client, topic_name):
    """A created topic appears in the v3 topic list and in v2 GET /topics."""
    create_topic(client, topic_name)
    v3_names = [t["topic_name"] for t in client.get(f"{V3}/topics").json()["data"]]
    assert topic_name in v3_names
    assert topic_name in client.get("/topics").json()


def test_duplicate_topic_is_400_40002(client, topic_name):
    """Creating an existing topic is 400 error_code 40002."""
    create_topic(client, topic_name)
    body = assert_error(_create(client, topic_name), 400, 40002)
    assert topic_name in body["message"]


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "a/b", "a b", "é"])
def test_invalid_topic_names_are_400_40002(client, name):
    """Empty, reserved, too long or non-[a-zA-Z0-9._-] names are 400 40002 with a message."""
    assert_error(_create(client, name), 400, 40002)


def test_longest_legal_topic_name_is_accepted(client, topic_name):
    """A 249-character name is legal (Kafka's limit) and usable end to end."""
    name = (topic_name + "x" * 249)[:249]
    assert _create(client, name).status_code == 201
    assert produce(client, name, [{"value": "YQ=="}]).status_code == 200


@pytest.mark.parametrize(
    ("config", "value"),
    [
        ("no.such.config", "1"),
        ("retention.ms", "abc"),
        ("cleanup.policy", "bogus"),
        ("segment.bytes", "1"),
        ("message.timestamp.type", "Now"),
    ],
)
def test_bad_configs_are_400_40002(client, topic_name, config, value):
    """Unknown config keys and invalid values are 400 40002, and nothing is created."""
    response = _create(client, topic_name, configs=[{"name": config, "value": value}])
    body = assert_error(response, 400, 40002)
    assert config in body["message"]
    assert_error(client.get(f"{V3}/topics/{topic_name}"), 404, 40403)


@pytest.mark.parametrize("partitions", [0, -1])
def test_bad_partition_count_is_400_40002(client, topic_name, partitions):
    """A partition count below 1 is 400 40002."""
    assert_error(_create(client, topic_name, partitions), 400, 40002)


def test_validate_only_creates_nothing(client, topic_name):
    """validate_only answers 201 with the would-be topic but creates nothing."""
    response = _create(client, topic_name, 2, validate_only=True)
    assert response.status_code == 201, response.text
    assert response.json()["partitions_count"] == 2
    assert_error(client.get(f"{V3}/topics/{topic_name}"), 404, 40403)
    assert topic_name not in client.get("/topics").json()


def test_validate_only_rejects_bad_config(client, topic_name):
    """validate_only still validates configs (400 40002)."""
    bad = [{"name": "retention.ms", "value": "abc"}]
    assert_error(_create(client, topic_name, configs=bad, validate_only=True), 400, 40002)


def test_validate_only_reports_existing_topic(client, topic_name):
    """validate_only on an existing topic name reports 'already exists' as a real create would."""
    create_topic(client, topic_name)
    assert_error(_create(client, topic_name, validate_only=True), 400, 40002)


# ---- v3 alter / delete -----------------------------------------------------------------------


def test_patch_partitions_count_up_then_produce_to_new_partition(client, topic_name):
    """PATCH partitions_count up adds partitions that can be written and read."""
    create_topic(client, topic_name, 2)
    response = client.patch(f"{V3}/topics/{topic_name}", json={"partitions_count": 4})
    assert response.status_code == 200, response.text
    assert response.json()["partitions_count"] == 4
    assert client.get(f"{V3}/topics/{topic_name}").json()["partitions_count"] == 4
    assert len(client.get(f"/topics/{topic_name}/partitions").json()) == 4
    acked = produce(client, topic_name, [{"value": "YQ=="}], partition=3)
    assert acked.json()["offsets"][0]["offset"] == 0


def test_patch_partitions_count_down_is_400(client, topic_name):
    """Shrinking a topic is 400 40002 and leaves the count unchanged."""
    create_topic(client, topic_name, 3)
    response = client.patch(f"{V3}/topics/{topic_name}", json={"partitions_count": 2})
    assert_error(response, 400, 40002)
    assert client.get(f"{V3}/topics/{topic_name}").json()["partitions_count"] == 3


def test_patch_unknown_topic_is_404_40403(client, topic_name):
    """PATCH of a missing topic is 404 40403 (v3 code)."""
    response = client.patch(f"{V3}/topics/{topic_name}", json={"partitions_count": 2})
    assert_error(response, 404, 40403)


def test_delete_topic_then_get_is_404_in_v3_and_v2(client, topic_name):
    """DELETE answers 204; afterwards v3 GET is 404 40403 and v2 GET is 404 40401."""
    create_topic(client, topic_name, 2)
    response = client.delete(f"{V3}/topics/{topic_name}")
    assert response.status_code == 204 and response.content == b""
    assert_error(client.get(f"{V3}/topics/{topic_name}"), 404, 40403)
    assert_error(client.get(f"/topics/{topic_name}"), 404, 40401)
    assert topic_name not in client.get("/topics").json()
    assert_error(client.delete(f"{V3}/topics/{topic_name}"), 404, 40403)


def test_recreate_after_delete_starts_at_offset_zero(client, topic_name):
    """A topic re-created after delete is empty: offsets restart at 0 and old data is gone."""
    create_topic(client, topic_name)
    produce(client, topic_name, [{"value": "YQ=="}] * 3)
    assert client.delete(f"{V3}/topics/{topic_name}").status_code == 204
    create_topic(client, topic_name)
    offsets = client.get(f"/topics/{topic_name}/partitions/0/offsets").json()
    assert offsets == {
        "beginning_offset": 0,
        "end_offset": 0,
        "last_stable_offset": 0,
        "size_bytes": 0,
    }
    acked = produce(client, topic_name, [{"value": "Yg=="}]).json()["offsets"][0]
    assert acked["offset"] == 0


def test_configs_alter_changes_values(client, topic_name):
    """configs:alter answers 204 and the configs list and v2 topic show the new value."""
    create_topic(client, topic_name, retention_ms=1000)
    body = {"data": [{"name": "retention.ms", "value": "5000"}]}
    response = client.post(f"{V3}/topics/{topic_name}/configs:alter", json=body)
    assert response.status_code == 204, response.text
    listed = client.get(f"{V3}/topics/{topic_name}/configs").json()["data"]
    assert {e["name"]: e["value"] for e in listed}["retention.ms"] == "5000"
    assert client.get(f"/topics/{topic_name}").json()["configs"]["retention.ms"] == "5000"


def test_configs_alter_bad_value_is_400_and_keeps_old(client, topic_name):
    """configs:alter with an invalid value is 400 40002 and changes nothing."""
    create_topic(client, topic_name, retention_ms=1000)
    body = {"data": [{"name": "retention.ms", "value": "soon"}]}
    assert_error(client.post(f"{V3}/topics/{topic_name}/configs:alter", json=body), 400, 40002)
    assert client.get(f"/topics/{topic_name}").json()["configs"]["retention.ms"] == "1000"


def test_configs_alter_validate_only_changes_nothing(client, topic_name):
    """configs:alter with validate_only answers 204 and keeps the old value."""
    create_topic(client, topic_name, retention_ms=1000)
    body = {"data": [{"name": "retention.ms", "value": "5000"}], "validate_only": True}
    assert client.post(f"{V3}/topics/{topic_name}/configs:alter", json=body).status_code == 204
    assert client.get(f"/topics/{topic_name}").json()["configs"]["retention.ms"] == "1000"


def test_configs_alter_validate_only_unknown_topic_is_404(client, topic_name):
    """configs:alter validate_only on a missing topic is 404 40403, as without validate_only."""
    body = {"data": [{"name": "retention.ms", "value": "5000"}], "validate_only": True}
    response = client.post(f"{V3}/topics/{topic_name}/configs:alter", json=body)
    assert_error(response, 404, 40403)


def test_v3_unknown_partition_is_404_40403(client, topic_name):
    """v3 GET of a partition that does not exist is 404 40403."""
    create_topic(client, topic_name, 2)
    assert client.get(f"{V3}/topics/{topic_name}/partitions/1").status_code == 200
    assert_error(client.get(f"{V3}/topics/{topic_name}/partitions/2"), 404, 40403)


# ---- v2 metadata ---------------------------------------------------------------------------


def test_v2_topic_has_name_configs_and_partitions_with_replicas(client, topic_name):
    """v2 GET /topics/{t} has name, non-empty string configs and partitions with replicas."""
    create_topic(client, topic_name, 2, retention_ms=60000)
    body = client.get(f"/topics/{topic_name}").json()
    assert body["name"] == topic_name
    assert body["configs"]["retention.ms"] == "60000"
    assert all(isinstance(v, str) for v in body["configs"].values())
    assert [p["partition"] for p in body["partitions"]] == [0, 1]
    for partition in body["partitions"]:
        (replica,) = partition["replicas"]
        assert replica["leader"] is True and replica["in_sync"] is True
        assert replica["broker"] == partition["leader"]


def test_v2_partitions_list_and_one_partition(client, topic_name):
    """/partitions lists every partition; /partitions/{p} equals its list entry."""
    create_topic(client, topic_name, 3)
    listed = client.get(f"/topics/{topic_name}/partitions").json()
    assert [p["partition"] for p in listed] == [0, 1, 2]
    assert client.get(f"/topics/{topic_name}/partitions/2").json() == listed[2]


def test_v2_unknown_topic_and_partition_codes(client, topic_name):
    """Unknown topic is 404 40401 on every v2 route; unknown partition is 404 40402."""
    for path in ("", "/partitions", "/partitions/0", "/partitions/0/offsets"):
        assert_error(client.get(f"/topics/{topic_name}{path}"), 404, 40401)
    create_topic(client, topic_name, 2)
    assert_error(client.get(f"/topics/{topic_name}/partitions/10"), 404, 40402)
    assert_error(client.get(f"/topics/{topic_name}/partitions/2/offsets"), 404, 40402)


def test_v2_partition_offsets_after_five_records(client, topic_name):
    """/offsets is {"beginning_offset": 0, "end_offset": 5} after producing 5 records (and
    the last stable offset with them: no transaction is open)."""
    create_topic(client, topic_name)
    assert client.get(f"/topics/{topic_name}/partitions/0/offsets").json() == {
        "beginning_offset": 0,
        "end_offset": 0,
        "last_stable_offset": 0,
        "size_bytes": 0,
    }
    assert produce(client, topic_name, [{"value": "YQ=="}] * 5).status_code == 200
    offsets = client.get(f"/topics/{topic_name}/partitions/0/offsets").json()
    assert offsets.pop("size_bytes") > 0  # one Parquet file
    assert offsets == {"beginning_offset": 0, "end_offset": 5, "last_stable_offset": 5}


def test_v2_brokers_lists_this_node(client):
    """GET /brokers lists exactly one broker, this node."""
    response = client.get("/brokers")
    assert response.status_code == 200
    assert response.json() == {"brokers": [0]}
