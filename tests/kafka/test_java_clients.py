"""Apache Kafka's Java clients (kafka-clients 4.1, the most used Kafka client), unmodified,
against lakelog's Kafka listener: the producer (idempotent by default, and transactional), the
consumer in a group, and the AdminClient on topics, configs, partitions, offsets, records, groups
and ACLs. Each scenario runs in its own JVM (tests/java/JavaClients.java) and reports what the
client saw; the answers are checked exactly here, and against lakelog's own HTTP API."""

from __future__ import annotations

from collections import defaultdict

import pytest

from storage_layout.partitioner import partition_for_key
from tests.gateway_process import start_gateway

pytestmark = pytest.mark.gateway


def test_idempotent_producer_and_group_consumer(java_clients, bootstrap, http, topic_name):
    seen = java_clients("produce-consume", bootstrap, topic_name)

    offsets_by_partition = defaultdict(list)
    for partition, offset, key in seen["produced"]:
        # the Java client's murmur2 partitioner puts each key where lakelog's HTTP API does
        assert partition == partition_for_key(key.encode(), 3), key
        offsets_by_partition[partition].append(offset)
    assert sum(map(len, offsets_by_partition.values())) == 300
    for offsets in offsets_by_partition.values():  # dense, in send order
        assert offsets == list(range(len(offsets)))

    produced = {(p, o, key) for p, o, key in seen["produced"]}
    consumed = {(p, o, key) for p, o, key, _value, _headers in seen["consumed"]}
    assert consumed == produced and len(seen["consumed"]) == 300
    for _p, _o, key, value, headers in seen["consumed"]:
        number = key[1:]
        assert (value, headers) == (f"v{number}", {"n": number})

    ends = {f"{topic_name}-{p}": len(offsets) for p, offsets in offsets_by_partition.items()}
    assert seen["assigned"] == 3
    assert seen["committed"] == seen["end_offsets"] == ends
    assert seen["after_commit"] == 0  # a new member resumes at the committed offsets

    lag = http.get(f"/v3/clusters/lakelog/consumer-groups/{topic_name}-group/lags")
    assert lag.status_code == 200, lag.text
    assert {row["partition_id"]: row["lag"] for row in lag.json()["data"]} == {0: 0, 1: 0, 2: 0}


def test_transactions_commit_abort_and_offsets(java_clients, bootstrap, topic_name):
    seen = java_clients("transactions", bootstrap, topic_name)
    check_transactions(seen, topic_name)
    # Kafka 4 clients use transactions v2 (ApiVersions finalizes transaction.version 2): the
    # epoch is bumped at each of the three ends, and no AddPartitionsToTxn was needed
    assert (seen["epoch_after"], seen["state_after"]) == (3, "CompleteCommit")


def test_transactions_v1_when_the_node_pins_it(java_clients, tmp_path_factory, topic_name):
    """LAKELOG_KAFKA_TRANSACTION_VERSION=1: the same client keeps the first protocol
    (AddPartitionsToTxn, AddOffsetsToTxn; one epoch for the producer's session)."""
    data_dir = tmp_path_factory.mktemp("transactions-v1") / "data"
    gateway = start_gateway(data_dir, env={"LAKELOG_KAFKA_TRANSACTION_VERSION": "1"}, kafka=True)
    try:
        seen = java_clients("transactions", gateway.kafka_address, topic_name)
    finally:
        gateway.stop()
    check_transactions(seen, topic_name)
    assert (seen["epoch_after"], seen["state_after"]) == (0, "CompleteCommit")


def check_transactions(seen: dict, topic_name: str) -> None:
    committed = [(offset, value) for _p, offset, _k, value, _h in seen["read_committed"]]
    # 3: a commit marker; 4..6: the aborted records, 7 their marker; 12: the last commit marker
    assert committed == [
        (0, "committed-0"),
        (1, "committed-1"),
        (2, "committed-2"),
        (8, "from-in0"),
        (9, "from-in1"),
        (10, "from-in2"),
        (11, "from-in3"),
    ]
    assert seen["read_committed_more"] == 0
    # read_uncommitted: the aborted records too (the Java consumer drops them only when it
    # reads committed), never the markers
    uncommitted = [value for _p, _o, _k, value, _h in seen["read_uncommitted"]]
    assert uncommitted == [
        *(f"committed-{n}" for n in range(3)),
        *(f"aborted-{n}" for n in range(3)),
        *(f"from-in{n}" for n in range(4)),
    ]
    assert seen["input_read"] == 4
    assert seen["group_offsets"] == {f"{topic_name}-in-0": 4}  # sendOffsetsToTransaction
    assert seen["output_end"] == 13


def test_admin_topics_configs_and_partitions(java_clients, bootstrap, http, topic_name):
    seen = java_clients("topics", bootstrap, topic_name)

    assert seen["create"] == {
        "partitions": 2,
        "replication_factor": 1,
        "topic_id_set": True,
        "cleanup.policy": "compact",
        "retention.ms": "1000",
        "retention.ms_source": "DYNAMIC_TOPIC_CONFIG",
    }
    assert seen["create_again"] == {"error": "TopicExistsException"}
    assert seen["validate_only"] is False  # validated, not created
    assert seen["bad_config"] == {"error": "InvalidConfigurationException"}
    assert seen["bad_name"] == {"error": "InvalidTopicException"}
    assert seen["listed"] is True
    assert seen["describe"] == {"internal": False, "partitions": [[0, 0, 1, 1], [1, 0, 1, 1]]}
    assert seen["configs"] == {
        "retention.ms": ["1000", "DYNAMIC_TOPIC_CONFIG"],
        "cleanup.policy": "compact",
        "segment.bytes_present": True,
    }
    # SET one config, DELETE another: it falls back to its default
    assert seen["alter"] == {"retention.ms": "2000", "cleanup.policy": ["delete", "DEFAULT_CONFIG"]}
    assert seen["alter_bad"] == {"error": "InvalidConfigurationException"}
    assert seen["add_partitions"] == 5
    assert seen["shrink_partitions"] == {"error": "InvalidPartitionsException"}
    assert seen["cluster"] == {"nodes": 1, "controller_set": True, "cluster_id_set": True}
    assert seen["delete"] is False  # no longer listed
    assert seen["delete_missing"] == {"error": "UnknownTopicOrPartitionException"}
    assert http.get(f"/v3/clusters/lakelog/topics/{topic_name}").status_code == 404


def test_admin_offsets_and_delete_records(java_clients, bootstrap, topic_name):
    seen = java_clients("records", bootstrap, topic_name)

    assert (seen["earliest"], seen["latest"]) == (0, 10)
    assert seen["for_time"] == 6
    assert seen["after_last"] == -1  # no record that recent: Kafka's "unknown offset"
    assert seen["delete_records"] == 4
    assert seen["earliest_after_delete"] == 4
    assert seen["delete_past_end"] == {"error": "OffsetOutOfRangeException"}
    assert [row[1] for row in seen["read_after_delete"]] == [4, 5, 6, 7, 8, 9]
    # a time before the log start finds the first offset still there, not a deleted one
    assert seen["offsets_for_time"] == 4


def test_admin_consumer_groups(java_clients, bootstrap, topic_name):
    seen = java_clients("groups", bootstrap, topic_name)

    assert seen["seen"] == 40
    assert seen["assignments"] == [2, 2]
    assert seen["describe_active"] == {
        "state": "Stable",
        "type": "Classic",
        "assignor": "range",
        "member_partitions": [2, 2],
    }
    assert seen["listed"] == {"type": "Classic", "state": "Empty", "protocol": "consumer"}
    assert seen["describe_empty"] == "Empty"
    assert seen["offsets"] == {f"{topic_name}-{p}": 10 for p in range(4)}
    assert seen["alter_offsets"] == 3
    assert seen["delete_offsets"] is False  # the offset of partition 0 is gone
    assert seen["delete_group"] is False  # no longer listed
    assert seen["describe_missing"] == "Dead"


def plain_login(token: str) -> dict:
    key_id, secret = token.split(".", 1)
    module = "org.apache.kafka.common.security.plain.PlainLoginModule"
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_jaas_config": f'{module} required username="{key_id}" password="{secret}";',
    }


def test_admin_acls_on_a_secured_node(java_clients, acl_node, topic_name):
    gateway, tokens = acl_node
    seen = java_clients("acls", gateway.kafka_address, topic_name, **plain_login(tokens["admin"]))
    assert seen == {
        "create": True,
        "describe": 1,
        "describe_any": 1,
        "delete": 1,
        "describe_after_delete": 0,
    }
    refused = java_clients("acls", gateway.kafka_address, topic_name, **plain_login(tokens["dave"]))
    assert refused["create"] == {"error": "ClusterAuthorizationException"}
