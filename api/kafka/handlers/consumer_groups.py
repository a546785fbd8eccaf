"""KIP-848's consumer group protocol over Kafka's wire: ConsumerGroupHeartbeat (join, reconcile,
leave: the coordinator assigns) and ConsumerGroupDescribe. Assignments travel by topic id;
the group core (api/core/groups/consumer_group.py) works with names."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from api.core.groups.consumer_group import Heartbeat
from api.core.groups.errors import GroupNotFound
from api.kafka.connection import Connection
from api.kafka.errors import error_code, error_message
from api.kafka.handlers.cluster import topic_uuid
from api.kafka.messages import milliseconds
from storage_layout.records import TopicPartition

MEMBER_TYPE_CONSUMER = 1  # ConsumerGroupDescribe v1's MemberType (0: classic, -1: unknown)


async def consumer_group_heartbeat(connection: Connection, request, version: int) -> dict:
    try:
        connection.check("READ", "group", request.group_id)
        names = await names_by_id(connection)
        beat = _heartbeat(connection, request, version, names)
        _check_topics(connection, beat)
        answer = await connection.broker.groups.consumer_heartbeat(request.group_id, beat)
    except Exception as error:
        return {
            "throttle_time": 0,
            "error_code": error_code(error),
            "error_message": error_message(error),
            "member_id": request.member_id or None,
            "member_epoch": 0,
            "heartbeat_interval": 0,
            "assignment": None,
        }
    ids = {name: topic_id for topic_id, name in names.items()}
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "member_id": answer.member_id,
        "member_epoch": answer.member_epoch,
        "heartbeat_interval": connection.settings.group_consumer_heartbeat_interval_ms,
        "assignment": _assignment(answer.assignment, ids),
    }


def _heartbeat(connection: Connection, request, version: int, names: dict) -> Heartbeat:
    owned = None
    if request.topic_partitions is not None:
        owned = frozenset(
            TopicPartition(names[t.topic_id], p)
            for t in request.topic_partitions
            if t.topic_id in names  # a deleted topic's partitions are no longer owned
            for p in t.partitions
        )
    member_id = request.member_id
    if version == 0 and request.member_epoch == 0 and not member_id:
        member_id = str(uuid.uuid4())  # v0: the coordinator names new members
    topic_names = request.subscribed_topic_names
    return Heartbeat(
        member_id=member_id,
        member_epoch=request.member_epoch,
        client_id=connection.client_id or "",
        client_host=f"/{connection.host}",
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=milliseconds(request.rebalance_timeout),
        topic_names=None if topic_names is None else tuple(topic_names),
        topic_regex=getattr(request, "subscribed_topic_regex", None),
        assignor=request.server_assignor,
        owned=owned,
        topic_filter=lambda topic: connection.permits("DESCRIBE", "topic", topic),
    )


def _check_topics(connection: Connection, beat: Heartbeat) -> None:
    """A member may subscribe only to topics it may read (Kafka: TOPIC_AUTHORIZATION_FAILED)."""
    for name in beat.topic_names or ():
        connection.check("DESCRIBE", "topic", name)


async def names_by_id(connection: Connection) -> dict[uuid.UUID, str]:
    return {topic_uuid(t): t.name for t in await connection.broker.topics.recent()}


def _assignment(partitions, ids: dict[str, uuid.UUID]) -> dict | None:
    if partitions is None:
        return None
    return {"topic_partitions": partitions_by_topic(partitions, ids)}


def partitions_by_topic(
    partitions, ids: dict[str, uuid.UUID], *, named: bool = False
) -> list[dict]:
    grouped: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return [
        {"topic_id": ids[topic], "partitions": indexes} | ({"topic_name": topic} if named else {})
        for topic, indexes in grouped.items()
        if topic in ids
    ]


async def consumer_group_describe(connection: Connection, request, version: int) -> dict:
    names = await names_by_id(connection)
    ids = {name: topic_id for topic_id, name in names.items()}
    described = []
    for group_id in request.group_ids:
        try:
            connection.check("DESCRIBE", "group", group_id)
            consumer = await connection.broker.groups.consumer_group(group_id)
            described.append(_described(connection, consumer, ids, request))
        except Exception as error:
            described.append(_refused(group_id, error))
    return {"throttle_time": 0, "groups": described}


def _described(connection: Connection, consumer, ids: dict, request) -> dict:
    members = [
        {
            "member_id": m.member_id,
            "instance_id": m.instance_id,
            "rack_id": m.rack_id,
            "member_epoch": m.epoch,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "subscribed_topic_names": sorted(m.topic_names),
            "subscribed_topic_regex": m.topic_regex,
            "assignment": {"topic_partitions": partitions_by_topic(m.assigned, ids, named=True)},
            "target_assignment": {
                "topic_partitions": partitions_by_topic(
                    consumer.target.get(m.member_id, ()), ids, named=True
                )
            },
            "member_type": MEMBER_TYPE_CONSUMER,
        }
        for m in consumer.members.values()
    ]
    operations = -(2**31)  # Kafka's "not requested"
    if request.include_authorized_operations:
        operations = connection.authorized_operations("group", consumer.group_id)
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "group_id": consumer.group_id,
        "group_state": consumer.state.value,
        "group_epoch": consumer.epoch,
        "assignment_epoch": consumer.assignment_epoch,
        "assignor_name": consumer.assignor(),
        "members": members,
        "authorized_operations": operations,
    }


def _refused(group_id: str, error: Exception) -> dict:
    code = error_code(error)
    if isinstance(error, GroupNotFound):
        code = ErrorCode.group_id_not_found
    return {
        "error_code": code,
        "error_message": error_message(error),
        "group_id": group_id,
        "group_state": "Dead",
        "group_epoch": -1,
        "assignment_epoch": -1,
        "assignor_name": "",
        "members": [],
    }
