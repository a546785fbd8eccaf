"""CreateTopics, DeleteTopics and CreatePartitions over the topic catalog. The store replicates,
so a replication factor is accepted and ignored, and a replica assignment counts the
partitions, as Kafka counts them, its broker ids otherwise ignored (-1 means the default:
`num.partitions`, lakelog's LAKELOG_KAFKA_AUTO_CREATE_PARTITIONS)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from api.core import topic_configs
from api.core.errors import InvalidReplicaAssignment, InvalidRequest
from api.kafka.connection import Connection
from api.kafka.errors import error_code, error_message
from api.kafka.handlers.cluster import topic_uuid
from api.kafka.handlers.configs import SOURCES
from api.security.authorizer import CLUSTER_RESOURCE_NAME

DEFAULT = -1  # Kafka's "the broker's default" for num_partitions and replication_factor


async def create_topics(connection: Connection, request, version: int) -> dict:
    results = [await _create(connection, topic, request.validate_only) for topic in request.topics]
    return {"throttle_time": 0, "topics": results}


async def _create(connection: Connection, topic, validate_only: bool) -> dict:
    broker = connection.broker
    configs = {config.name: config.value for config in topic.configs if config.value is not None}
    try:
        if not connection.permits("CREATE", "cluster", CLUSTER_RESOURCE_NAME):
            connection.check("CREATE", "topic", topic.name)
        partitions = _partition_count(topic, connection.settings.kafka_auto_create_partitions)
        if validate_only:
            created = await broker.topics.validate_new(topic.name, partitions, configs)
        else:
            created = await broker.topics.create(topic.name, partitions=partitions, configs=configs)
    except Exception as error:
        return {
            "name": topic.name,
            "topic_id": None,
            "error_code": error_code(error),
            "error_message": error_message(error),
            "configs": None,
        }
    return {
        "name": topic.name,
        "topic_id": topic_uuid(created),
        "error_code": ErrorCode.none,
        "error_message": None,
        "num_partitions": created.partitions,
        "replication_factor": 1,
        # Kafka answers a created topic's configs (KIP-525); Java's AdminClient reads them
        "configs": [
            {
                "name": config.name,
                "value": config.value,
                "read_only": False,
                "config_source": SOURCES[config.source],
                "is_sensitive": False,
            }
            for config in topic_configs.describe_configs(created)
        ],
    }


def _partition_count(topic, default_partitions: int) -> int:
    """Kafka's rules: a replica assignment gives the count (each of partitions 0 to n-1 once,
    in any order, each with distinct brokers) and excludes a count or replication factor;
    else -1 is the default.

    Raises:
        InvalidRequest: both an assignment and a count or replication factor.
        InvalidReplicaAssignment: a partition twice or missing, or an empty or repeating
            replica list.
    """
    assignments = list(topic.assignments or ())
    if not assignments:
        return default_partitions if topic.num_partitions == DEFAULT else topic.num_partitions
    if topic.num_partitions != DEFAULT or topic.replication_factor != DEFAULT:
        raise InvalidRequest(
            "Both num_partitions or replication_factor and a replica assignment were set: "
            "give one or the other."
        )
    indexes = [assignment.partition_index for assignment in assignments]
    if sorted(indexes) != list(range(len(assignments))):
        raise InvalidReplicaAssignment(
            f"Replica assignments must name each of partitions 0 to {len(assignments) - 1} "
            f"once; found {sorted(indexes)}."
        )
    for assignment in assignments:
        brokers = list(assignment.broker_ids)
        if not brokers or len(set(brokers)) != len(brokers):
            raise InvalidReplicaAssignment(
                f"Partition {assignment.partition_index}'s replica list {brokers} must be "
                "non-empty and repeat no broker."
            )
    return len(assignments)


async def delete_topics(connection: Connection, request, version: int) -> dict:
    responses = []
    for name in request.topic_names:
        try:
            connection.check("DELETE", "topic", name)
            await connection.broker.topics.delete(name)
            responses.append({"name": name, "error_code": ErrorCode.none})
        except Exception as error:
            responses.append(
                {
                    "name": name,
                    "error_code": error_code(error),
                    "error_message": error_message(error),
                }
            )
    return {"throttle_time": 0, "responses": responses}


async def create_partitions(connection: Connection, request, version: int) -> dict:
    results = []
    for topic in request.topics:
        try:
            connection.check("ALTER", "topic", topic.name)
            if request.validate_only:
                current = await connection.broker.topics.get(topic.name)
                if topic.count <= current.partitions:
                    raise ValueError("the count must exceed the current partition count")
            else:
                await connection.broker.topics.alter(topic.name, partitions=topic.count)
            results.append({"name": topic.name, "error_code": ErrorCode.none})
        except Exception as error:
            code = ErrorCode.invalid_partitions if isinstance(error, ValueError) else None
            results.append(
                {
                    "name": topic.name,
                    "error_code": code or error_code(error),
                    "error_message": error_message(error),
                }
            )
    return {"throttle_time": 0, "results": results}


async def delete_records(connection: Connection, request, version: int) -> dict:
    topics = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            answer = {"partition_index": partition.partition_index}
            try:
                connection.check("DELETE", "topic", topic.name)
                start = await connection.broker.partitions.delete_records(
                    topic.name, partition.partition_index, partition.offset
                )
                partitions.append(answer | {"low_watermark": start, "error_code": ErrorCode.none})
            except Exception as error:
                partitions.append(answer | {"low_watermark": -1, "error_code": error_code(error)})
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
