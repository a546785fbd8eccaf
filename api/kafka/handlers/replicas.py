"""What Kafka's replica tools ask (kafka-leader-election, kafka-reassign-partitions,
kafka-log-dirs), answered truthfully for a system without follower replicas: the store
replicates every partition, each partition has one replica, its leader, and leadership follows
node liveness (api/core/leaders.py).

- ElectLeaders: a partition led by its preferred node needs no election
  (ELECTION_NOT_NEEDED, as Kafka answers); one led elsewhere is being handed over to it already,
  so the election is accepted. An unclean election is never needed: no replica falls behind.
- AlterPartitionReassignments: moving a partition to its own leader is a no-op; any other
  replica set is INVALID_REPLICA_ASSIGNMENT (there are no replicas to place). Cancelling finds
  none in progress. ListPartitionReassignments: none, ever.
- DescribeLogDirs: one log dir per node, the storage root, with the partitions this node leads
  and the bytes of their live data files.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from api.kafka.connection import Connection
from api.kafka.errors import error_code, error_message
from api.security.authorizer import CLUSTER_RESOURCE_NAME

PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types
NO_REPLICAS = (
    "lakelog partitions have no follower replicas to place: the store replicates each "
    "partition, and its leader follows node liveness."
)


async def elect_leaders(connection: Connection, request, version: int) -> dict:
    if not connection.permits("ALTER", "cluster", CLUSTER_RESOURCE_NAME):
        return _refused(ErrorCode.cluster_authorization_failed, "replica_election_results")
    results = []
    for name, topic, partitions in await _named_partitions(connection, request.topic_partitions):
        election_type = getattr(request, "election_type", PREFERRED)  # v1+
        answers = [_election(connection, topic, p, election_type) for p in partitions]
        if request.topic_partitions is None:  # as Kafka: of all partitions, the elected ones
            answers = [a for a in answers if a["error_code"] != ErrorCode.election_not_needed]
        if answers:
            results.append({"topic": name, "partition_result": answers})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "replica_election_results": results}


def _election(connection: Connection, topic, partition: int, election_type: int) -> dict:
    """One partition's answer; `topic` is its TopicInfo, or the error of looking it up."""
    answer = {"partition_id": partition, "error_code": ErrorCode.none, "error_message": None}
    if isinstance(topic, Exception):
        return answer | {"error_code": error_code(topic), "error_message": error_message(topic)}
    if partition < 0 or partition >= topic.partitions:
        return answer | {"error_code": ErrorCode.unknown_topic_or_partition}
    partitions = connection.broker.partitions
    leader = partitions.leader_for_clients(topic.name, partition)
    if election_type == UNCLEAN or leader == partitions.preferred_leader(topic.name, partition):
        return answer | {"error_code": ErrorCode.election_not_needed}
    return answer


async def _named_partitions(connection: Connection, requested) -> list[tuple]:
    """(name, TopicInfo or the error of looking it up, partition indexes) per topic named;
    None names every partition of every topic."""
    topics = connection.broker.topics
    if requested is None:
        return [(t.name, t, list(range(t.partitions))) for t in await topics.list_all()]
    named = []
    for entry in requested:
        try:
            info = await topics.get(entry.topic)
        except Exception as error:
            info = error
        named.append((entry.topic, info, list(entry.partitions)))
    return named


async def alter_partition_reassignments(connection: Connection, request, version: int) -> dict:
    if not connection.permits("ALTER", "cluster", CLUSTER_RESOURCE_NAME):
        return _refused(ErrorCode.cluster_authorization_failed, "responses")
    responses = []
    for topic in request.topics:
        answers = [await _reassignment(connection, topic.name, p) for p in topic.partitions]
        responses.append({"name": topic.name, "partitions": answers})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "responses": responses}


async def _reassignment(connection: Connection, topic_name: str, partition) -> dict:
    answer = {"partition_index": partition.partition_index, "error_code": ErrorCode.none}
    try:
        topic = await connection.broker.topics.get(topic_name)
        topic.check_partition(partition.partition_index)
    except Exception as error:
        return answer | {"error_code": error_code(error), "error_message": error_message(error)}
    if partition.replicas is None:  # a cancellation
        return answer | {"error_code": ErrorCode.no_reassignment_in_progress}
    leader = connection.broker.partitions.leader_for_clients(topic_name, partition.partition_index)
    if list(partition.replicas) == [leader]:
        return answer
    refused = ErrorCode.invalid_replica_assignment
    return answer | {"error_code": refused, "error_message": NO_REPLICAS}


async def list_partition_reassignments(connection: Connection, request, version: int) -> dict:
    if not connection.permits("DESCRIBE", "cluster", CLUSTER_RESOURCE_NAME):
        return _refused(ErrorCode.cluster_authorization_failed, "topics")
    return {"throttle_time": 0, "error_code": ErrorCode.none, "topics": []}


async def describe_log_dirs(connection: Connection, request, version: int) -> dict:
    if not connection.permits("DESCRIBE", "cluster", CLUSTER_RESOURCE_NAME):
        return _refused(ErrorCode.cluster_authorization_failed, "results")
    partitions = connection.broker.partitions
    root, total_bytes, usable_bytes = partitions.storage_root()
    topics = []
    for _name, topic, indexes in await _named_partitions(connection, request.topics):
        if isinstance(topic, Exception):
            continue  # Kafka leaves out what this broker does not hold
        led = [
            i for i in indexes if 0 <= i < topic.partitions and _leads(connection, topic.name, i)
        ]
        sizes = [
            {
                "partition_index": index,
                "partition_size": await partitions.size_bytes(topic.name, index),
                "offset_lag": 0,
                "is_future_key": False,
            }
            for index in led
        ]
        if sizes:
            topics.append({"name": topic.name, "partitions": sizes})
    result = {
        "error_code": ErrorCode.none,
        "log_dir": root,
        "topics": topics,
        "total_bytes": total_bytes,
        "usable_bytes": usable_bytes,
    }
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results": [result]}


def _leads(connection: Connection, topic_name: str, partition: int) -> bool:
    partitions = connection.broker.partitions
    return partitions.leader_for_clients(topic_name, partition) == connection.broker.cluster.node_id


def _refused(code: ErrorCode, list_field: str) -> dict:
    return {"throttle_time": 0, "error_code": code, list_field: []}
