"""Metadata, DescribeTopicPartitions and InitProducerId: what a client asks first, after
ApiVersions (the registry's own answer, api/kafka/handlers/__init__.py)."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from api.core.internal_topics import is_view
from api.kafka.connection import Connection
from api.kafka.errors import error_code
from api.kafka.messages import milliseconds
from api.security.authorizer import CLUSTER_RESOURCE_NAME
from storage_layout.errors import TopicExists, TopicNotFound
from storage_layout.meta.catalog import TopicInfo

NO_NODE = -1
ZERO_UUID = uuid.UUID(int=0)


async def metadata(connection: Connection, request, version: int) -> dict:
    broker = connection.broker
    names = _requested_topics(request, version)
    if names is None:  # every topic the principal may see, as Kafka filters its answer
        topics = await broker.topics.list_all() + broker.topics.internal_views()
        visible = [t for t in topics if connection.permits("DESCRIBE", "topic", t.name)]
        described = [_topic(connection, topic, request) for topic in visible]
    else:
        described = [await _named_topic(connection, name, request) for name in names]
        described += await _topics_by_id(connection, _requested_ids(request), request)
    return {
        "throttle_time": 0,
        "brokers": brokers(connection),
        "cluster_id": connection.settings.cluster_id,
        "controller_id": broker.cluster.node_id,
        "topics": described,
    }


def _requested_topics(request, version: int) -> list[str] | None:
    """None for every topic: a null list, or (v0 only) an empty one."""
    if request.topics is None or (version == 0 and not request.topics):
        return None
    return [topic.name for topic in request.topics if topic.name]


def _requested_ids(request) -> list[uuid.UUID]:
    """Topics asked for by id alone (v10+): Kafka 4's consumer learns its KIP-848 assignment
    by topic id and asks Metadata for the names."""
    return [
        topic.topic_id
        for topic in request.topics
        if not topic.name and getattr(topic, "topic_id", None) not in (None, ZERO_UUID)
    ]


async def _topics_by_id(connection: Connection, ids: list[uuid.UUID], request) -> list[dict]:
    if not ids:
        return []
    by_id = {topic_uuid(t): t for t in await connection.broker.topics.list_all()}
    described = []
    for topic_id in ids:
        topic = by_id.get(topic_id)
        if topic is None or not connection.permits("DESCRIBE", "topic", topic.name):
            described.append(_unknown_id(topic_id))
        else:
            described.append(_topic(connection, topic, request))
    return described


def _unknown_id(topic_id: uuid.UUID) -> dict:
    """As Kafka: an id the principal may not see is as unknown as one that does not exist."""
    return {
        "error_code": ErrorCode.unknown_topic_id,
        "name": None,
        "topic_id": topic_id,
        "partitions": [],
    }


async def _named_topic(connection: Connection, name: str, request) -> dict:
    broker = connection.broker
    try:
        connection.check("DESCRIBE", "topic", name)
        return _topic(connection, await broker.topics.describe(name), request)
    except TopicNotFound as missing:
        auto = getattr(request, "allow_auto_topic_creation", False)
        may_create = connection.permits("CREATE", "cluster", CLUSTER_RESOURCE_NAME)
        if not (auto and connection.settings.kafka_auto_create_topics and may_create):
            return _unknown_topic(name, missing)
    except Exception as error:
        return _unknown_topic(name, error)
    return await _auto_created(connection, name, request)


async def _auto_created(connection: Connection, name: str, request) -> dict:
    """Kafka's auto.create.topics.enable: num.partitions, the cluster defaults. An illegal
    name is INVALID_TOPIC_EXCEPTION; a topic another request created first is simply there."""
    broker = connection.broker
    try:
        partitions = connection.settings.kafka_auto_create_partitions
        created = await broker.topics.create(name, partitions=partitions, configs={})
        return _topic(connection, created, request)
    except TopicExists:
        return _topic(connection, await broker.topics.get(name), request)
    except Exception as error:
        return _unknown_topic(name, error)


def _unknown_topic(name: str, error: Exception) -> dict:
    return {
        "error_code": error_code(error),
        "name": name,
        "topic_id": uuid.UUID(int=0),
        "partitions": [],
    }


def _topic(connection: Connection, topic: TopicInfo, request, indexes: range | None = None) -> dict:
    """A topic's Metadata (or DescribeTopicPartitions) answer: each partition with its
    leader, the one replica and in-sync replica there is (the store replicates)."""
    broker = connection.broker
    partitions = []
    for index in indexes if indexes is not None else range(topic.partitions):
        leader = broker.partitions.leader_for_clients(topic.name, index)
        partitions.append(
            {
                "error_code": ErrorCode.none,
                "partition_index": index,
                "leader_id": leader,
                "leader_epoch": broker.partitions.leader_epoch_for_clients(topic.name, index),
                "replica_nodes": [leader],
                "isr_nodes": [leader],
                "eligible_leader_replicas": [],
                "last_known_elr": [],
            }
        )
    described = {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic_uuid(topic),
        "is_internal": is_view(topic),
        "partitions": partitions,
    }
    # Eight ACL decisions per topic: only when asked for (Kafka's default is "not requested").
    if getattr(request, "include_topic_authorized_operations", False):
        operations = connection.authorized_operations("topic", topic.name)
        described["topic_authorized_operations"] = operations
    return described


async def describe_topic_partitions(connection: Connection, request, version: int) -> dict:
    """KIP-966's paged Metadata (what kafka-topics --describe asks in Kafka 4): topics in name
    order from the cursor, at most `response_partition_limit` partitions, then a next cursor.
    No topics named: every topic the principal may describe."""
    cursor = request.cursor
    first = cursor.topic_name if cursor is not None else ""
    every = not request.topics
    if every:
        listed = (
            await connection.broker.topics.list_all() + connection.broker.topics.internal_views()
        )
        names = sorted(t.name for t in listed)
    else:
        names = sorted({topic.name for topic in request.topics})
    names = [name for name in names if name >= first]
    if (cursor is not None and not every and first not in names) or (
        cursor is not None and cursor.partition_index < 0
    ):
        refused = {"error_code": ErrorCode.invalid_request, "partitions": []}
        return {"throttle_time": 0, "topics": [refused | {"name": n} for n in names]}
    topics, remaining, next_cursor = [], max(1, request.response_partition_limit), None
    for name in names:
        if not connection.permits("DESCRIBE", "topic", name):
            if not every:
                topics.append(_refused_topic(name, ErrorCode.topic_authorization_failed))
            continue
        if remaining == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        try:
            topic = await connection.broker.topics.describe(name)
        except Exception as error:
            if not every:
                topics.append(_refused_topic(name, error_code(error)))
            continue
        start = cursor.partition_index if cursor is not None and name == first else 0
        stop = min(topic.partitions, start + remaining)
        described = _topic(connection, topic, request, range(start, stop))
        described["topic_authorized_operations"] = connection.authorized_operations("topic", name)
        topics.append(described)
        remaining -= stop - start
        if stop < topic.partitions:
            next_cursor = {"topic_name": name, "partition_index": stop}
            break
    return {"throttle_time": 0, "topics": topics, "next_cursor": next_cursor}


def _refused_topic(name: str, code: ErrorCode) -> dict:
    return {
        "error_code": code,
        "name": name,
        "topic_id": uuid.UUID(int=0),
        "is_internal": False,
        "partitions": [],
    }


def _check_idempotent_write(connection: Connection) -> None:
    """Kafka 3+: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic, allows a producer id."""
    if connection.permits("IDEMPOTENT_WRITE", "cluster", CLUSTER_RESOURCE_NAME):
        return
    if not connection.permits_on_any("WRITE", "topic"):
        connection.check("IDEMPOTENT_WRITE", "cluster", CLUSTER_RESOURCE_NAME)


def topic_uuid(topic: TopicInfo) -> uuid.UUID:
    try:
        return uuid.UUID(topic.topic_id)
    except ValueError:
        return uuid.uuid5(uuid.NAMESPACE_URL, f"lakelog:{topic.name}:{topic.topic_id}")


def brokers(connection: Connection) -> list[dict]:
    """The live nodes that serve a Kafka listener, as Metadata lists brokers."""
    cluster = connection.broker.cluster
    brokers = []
    for node_id in cluster.live_nodes():
        address = cluster.kafka_address(node_id)
        if address is None:
            continue
        host, _, port = address.rpartition(":")
        brokers.append({"node_id": node_id, "host": host, "port": int(port), "rack": None})
    return brokers


async def init_producer_id(connection: Connection, request, version: int) -> dict:
    try:
        transactional_id = request.transactional_id
        if transactional_id is None:
            _check_idempotent_write(connection)
            identity = await connection.broker.init_producer(None, connection.client_id)
        else:
            # The coordinator aborts the id's open transaction and fences older epochs.
            connection.check("WRITE", "transactional_id", transactional_id)
            identity = await connection.broker.transactions.init_producer(
                transactional_id, milliseconds(request.transaction_timeout)
            )
        # Bound to its principal, as over HTTP: another principal cannot write with it.
        await connection.security.bind_producer(identity.producer_id, connection.principal)
    except Exception as error:
        return {"throttle_time": 0, "error_code": error_code(error), "producer_epoch": -1}
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "producer_id": identity.producer_id,
        "producer_epoch": identity.producer_epoch,
    }
