"""One coroutine per Kafka API, each translating its request to calls on the broker core and
the outcome to its response, as a mapping that api/kafka/messages.py builds into the
response of the request's version. The registry (`APIS`) is what ApiVersions advertises:
each API at the versions its handler serves, all within what kio's schemas cover."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from api.kafka.connection import Connection

Handler = Callable[[Connection, object, int], Awaitable[Mapping | None]]


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


async def api_versions(connection: Connection, request, version: int) -> dict:
    levels = {
        TRANSACTION_VERSION: connection.settings.kafka_transaction_version,
        GROUP_VERSION: 1,
        SHARE_VERSION: 1,
    }
    return _versions(ErrorCode.none, levels)


def api_versions_unsupported() -> dict:
    """The answer to an ApiVersions request of a version this node does not know: v0's shape,
    UNSUPPORTED_VERSION and the supported ranges, so the client retries at one of them."""
    return _versions(ErrorCode.unsupported_version, {})


def _versions(code: ErrorCode, levels: dict[str, int]) -> dict:
    keys = [
        {"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}
        for api in sorted(APIS.values(), key=lambda api: api.key)
    ]
    supported = [
        {"name": name, "min_version": low, "max_version": high}
        for name, (low, high) in FEATURES.items()
    ]
    finalized = [
        {"name": name, "min_version_level": level, "max_version_level": level}
        for name, level in levels.items()
    ]
    return {
        "error_code": code,
        "api_keys": keys,
        "throttle_time": 0,
        "supported_features": supported,  # v3+ (tagged fields: older versions drop them)
        "finalized_features_epoch": FINALIZED_FEATURES_EPOCH,
        "finalized_features": finalized,
    }


# Kafka's feature flags (KIP-584) as ApiVersions v3+ reports them: name -> (lowest, highest)
# supported level. Clients choose protocols by the finalized levels (the node's settings):
# transaction.version 2 is KIP-890's second transaction protocol.
TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"  # 1: KIP-848's consumer group protocol
SHARE_VERSION = "share.version"  # 1: KIP-932's share groups
FEATURES = {TRANSACTION_VERSION: (0, 2), GROUP_VERSION: (0, 1), SHARE_VERSION: (0, 1)}
# The features never change while a node runs: one epoch (Kafka's is a metadata offset).
FINALIZED_FEATURES_EPOCH = 1


def _table() -> dict[int, Api]:
    from api.kafka.handlers import (
        acls,
        admin,
        cluster,
        configs,
        fetch,
        offsets,
        produce,
        quotas,
        replicas,
        sasl,
        share_fetch,
        telemetry,
        transaction_admin,
        transactions,
    )

    apis = [
        Api(0, "Produce", 3, 12, produce.produce),
        Api(1, "Fetch", 4, 12, fetch.fetch),
        Api(2, "ListOffsets", 1, 10, offsets.list_offsets),
        Api(3, "Metadata", 0, 12, cluster.metadata),
        Api(17, "SaslHandshake", 1, 1, sasl.sasl_handshake),
        Api(18, "ApiVersions", 0, 4, api_versions),
        Api(19, "CreateTopics", 2, 7, admin.create_topics),
        Api(20, "DeleteTopics", 1, 5, admin.delete_topics),
        Api(21, "DeleteRecords", 0, 2, admin.delete_records),
        Api(22, "InitProducerId", 0, 4, cluster.init_producer_id),
        Api(23, "OffsetForLeaderEpoch", 2, 4, offsets.offset_for_leader_epoch),
        Api(24, "AddPartitionsToTxn", 0, 3, transactions.add_partitions_to_txn),
        Api(25, "AddOffsetsToTxn", 0, 3, transactions.add_offsets_to_txn),
        Api(26, "EndTxn", 0, 5, transactions.end_txn),
        Api(28, "TxnOffsetCommit", 0, 5, transactions.txn_offset_commit),
        Api(29, "DescribeAcls", 1, 3, acls.describe_acls),
        Api(30, "CreateAcls", 1, 3, acls.create_acls),
        Api(31, "DeleteAcls", 1, 3, acls.delete_acls),
        Api(32, "DescribeConfigs", 1, 4, configs.describe_configs),
        Api(33, "AlterConfigs", 0, 2, configs.alter_configs),
        Api(35, "DescribeLogDirs", 1, 4, replicas.describe_log_dirs),
        Api(36, "SaslAuthenticate", 0, 2, sasl.sasl_authenticate),
        Api(37, "CreatePartitions", 0, 3, admin.create_partitions),
        Api(43, "ElectLeaders", 0, 2, replicas.elect_leaders),
        Api(44, "IncrementalAlterConfigs", 0, 1, configs.incremental_alter_configs),
        Api(45, "AlterPartitionReassignments", 0, 0, replicas.alter_partition_reassignments),
        Api(46, "ListPartitionReassignments", 0, 0, replicas.list_partition_reassignments),
        Api(48, "DescribeClientQuotas", 0, 1, quotas.describe_client_quotas),
        Api(49, "AlterClientQuotas", 0, 1, quotas.alter_client_quotas),
        Api(50, "DescribeUserScramCredentials", 0, 0, sasl.describe_user_scram_credentials),
        Api(51, "AlterUserScramCredentials", 0, 0, sasl.alter_user_scram_credentials),
        Api(60, "DescribeCluster", 0, 1, configs.describe_cluster),
        Api(61, "DescribeProducers", 0, 0, transaction_admin.describe_producers),
        Api(65, "DescribeTransactions", 0, 0, transaction_admin.describe_transactions),
        Api(66, "ListTransactions", 0, 1, transaction_admin.list_transactions),
        Api(74, "ListConfigResources", 1, 1, configs.list_config_resources),
        Api(71, "GetTelemetrySubscriptions", 0, 0, telemetry.get_telemetry_subscriptions),
        Api(75, "DescribeTopicPartitions", 0, 0, cluster.describe_topic_partitions),
        Api(78, "ShareFetch", 1, 2, share_fetch.share_fetch),
        Api(79, "ShareAcknowledge", 1, 2, share_fetch.share_acknowledge),
        *_group_apis(),
    ]
    return {api.key: api for api in sorted(apis, key=lambda api: api.key)}


def _group_apis() -> list[Api]:
    from api.kafka.handlers import consumer_groups, groups, share_groups

    return [
        Api(8, "OffsetCommit", 2, 9, groups.offset_commit),
        Api(9, "OffsetFetch", 1, 9, groups.offset_fetch),
        Api(10, "FindCoordinator", 0, 4, groups.find_coordinator),
        Api(11, "JoinGroup", 0, 9, groups.join_group),
        Api(12, "Heartbeat", 0, 4, groups.heartbeat),
        Api(13, "LeaveGroup", 0, 5, groups.leave_group),
        Api(14, "SyncGroup", 0, 5, groups.sync_group),
        Api(15, "DescribeGroups", 0, 5, groups.describe_groups),
        Api(16, "ListGroups", 0, 5, groups.list_groups),
        Api(42, "DeleteGroups", 0, 2, groups.delete_groups),
        Api(47, "OffsetDelete", 0, 0, groups.offset_delete),
        Api(68, "ConsumerGroupHeartbeat", 0, 1, consumer_groups.consumer_group_heartbeat),
        Api(69, "ConsumerGroupDescribe", 0, 1, consumer_groups.consumer_group_describe),
        Api(76, "ShareGroupHeartbeat", 1, 1, share_groups.share_group_heartbeat),
        Api(77, "ShareGroupDescribe", 1, 1, share_groups.share_group_describe),
        Api(90, "DescribeShareGroupOffsets", 0, 1, share_groups.describe_share_group_offsets),
        Api(91, "AlterShareGroupOffsets", 0, 0, share_groups.alter_share_group_offsets),
        Api(92, "DeleteShareGroupOffsets", 0, 0, share_groups.delete_share_group_offsets),
    ]


APIS: dict[int, Api] = _table()
