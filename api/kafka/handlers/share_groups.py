"""KIP-932's share group membership over Kafka's wire: ShareGroupHeartbeat (join, heartbeat,
leave: the coordinator assigns, api/core/shares/membership.py) and ShareGroupDescribe.
Assignments travel by topic id; the core works with names."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from api.core.shares import admin
from api.core.shares.membership import ShareGroupView, ShareHeartbeat
from api.kafka.connection import Connection
from api.kafka.errors import error_code, error_message
from api.kafka.handlers.cluster import ZERO_UUID
from api.kafka.handlers.consumer_groups import names_by_id, partitions_by_topic

SIMPLE_ASSIGNOR = "simple"  # Kafka's name for the share groups' assignor


async def share_group_heartbeat(connection: Connection, request, version: int) -> dict:
    try:
        connection.check("READ", "group", request.group_id)
        for name in request.subscribed_topic_names or ():
            connection.check("DESCRIBE", "topic", name)
        answer = await connection.broker.share_members.heartbeat(
            request.group_id, _beat(connection, request)
        )
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
    assignment = None
    if answer.assignment is not None:
        ids = {name: topic_id for topic_id, name in (await names_by_id(connection)).items()}
        assignment = {"topic_partitions": partitions_by_topic(answer.assignment, ids)}
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "member_id": answer.member_id,
        "member_epoch": answer.member_epoch,
        "heartbeat_interval": answer.heartbeat_interval_ms,
        "assignment": assignment,
    }


def _beat(connection: Connection, request) -> ShareHeartbeat:
    names = request.subscribed_topic_names
    return ShareHeartbeat(
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        client_id=connection.client_id or "",
        client_host=f"/{connection.host}",
        rack_id=request.rack_id,
        topic_names=None if names is None else tuple(names),
    )


async def share_group_describe(connection: Connection, request, version: int) -> dict:
    ids = {name: topic_id for topic_id, name in (await names_by_id(connection)).items()}
    described = []
    for group_id in request.group_ids:
        try:
            connection.check("DESCRIBE", "group", group_id)
            group = await admin.group_view(connection.broker, group_id)
            described.append(_described(connection, group, ids, request))
        except Exception as error:
            described.append(
                {
                    "error_code": error_code(error),
                    "error_message": error_message(error),
                    "group_id": group_id,
                    "group_state": "Dead",
                    "group_epoch": -1,
                    "assignment_epoch": -1,
                    "assignor_name": "",
                    "members": [],
                }
            )
    return {"throttle_time": 0, "groups": described}


def _described(connection: Connection, group: ShareGroupView, ids: dict, request) -> dict:
    members = [
        {
            "member_id": m.member_id,
            "rack_id": m.rack_id,
            "member_epoch": m.epoch,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "subscribed_topic_names": sorted(m.topic_names),
            "assignment": {"topic_partitions": partitions_by_topic(m.assigned, ids, named=True)},
        }
        for m in group.members.values()
    ]
    operations = -(2**31)  # Kafka's "not requested"
    if request.include_authorized_operations:
        operations = connection.authorized_operations("group", group.group_id)
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "group_id": group.group_id,
        "group_state": group.state,
        "group_epoch": group.epoch,
        "assignment_epoch": group.epoch,
        "assignor_name": SIMPLE_ASSIGNOR,
        "members": members,
        "authorized_operations": operations,
    }


# ---- offsets administration (kafka-share-groups --describe, --reset-offsets, --delete-offsets)


async def describe_share_group_offsets(connection: Connection, request, version: int) -> dict:
    ids = {name: topic_id for topic_id, name in (await names_by_id(connection)).items()}
    groups = []
    for group in request.groups:
        try:
            connection.check("DESCRIBE", "group", group.group_id)
            views = await admin.describe_offsets(connection.broker, group.group_id)
        except Exception as error:
            groups.append({"group_id": group.group_id, "topics": []} | _error_fields(error))
            continue
        groups.append(
            {"group_id": group.group_id, "topics": _offset_topics(connection, views, group, ids)}
            | _error_fields(None)
        )
    return {"throttle_time": 0, "groups": groups}


def _offset_topics(connection: Connection, views, group, ids: dict) -> list[dict]:
    """The stored share partitions (all, or those asked for; one asked for without a state
    answers start offset -1, as Kafka does)."""
    stored = {(v.topic, v.partition): v for v in views}
    if group.topics is None:
        wanted = list(stored)
    else:
        wanted = [(t.topic_name, p) for t in group.topics for p in t.partitions]
    topics: dict[str, list[dict]] = {}
    for topic, partition in wanted:
        if not connection.permits("DESCRIBE", "topic", topic):
            continue
        view = stored.get((topic, partition))
        topics.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "start_offset": -1 if view is None else view.start_offset,
                "leader_epoch": -1,
                "lag": -1 if view is None else view.lag,
            }
            | _error_fields(None)
        )
    return [
        {"topic_name": topic, "topic_id": ids.get(topic, ZERO_UUID), "partitions": partitions}
        for topic, partitions in topics.items()
    ]


async def alter_share_group_offsets(connection: Connection, request, version: int) -> dict:
    group_id = request.group_id
    try:
        connection.check("READ", "group", group_id)
        admin.check_empty(connection.broker, group_id)
    except Exception as error:
        return {"throttle_time": 0, "responses": []} | _error_fields(error)
    ids = {name: topic_id for topic_id, name in (await names_by_id(connection)).items()}
    responses = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            error = await _reset(
                connection,
                group_id,
                topic.topic_name,
                partition.partition_index,
                partition.start_offset,
            )
            partitions.append({"partition_index": partition.partition_index} | _error_fields(error))
        responses.append(
            {
                "topic_name": topic.topic_name,
                "topic_id": ids.get(topic.topic_name, ZERO_UUID),
                "partitions": partitions,
            }
        )
    return {"throttle_time": 0, "responses": responses} | _error_fields(None)


async def delete_share_group_offsets(connection: Connection, request, version: int) -> dict:
    group_id = request.group_id
    try:
        connection.check("DELETE", "group", group_id)
        admin.check_empty(connection.broker, group_id)
        stored = await admin.stored_partitions(connection.broker, group_id)
    except Exception as error:
        return {"throttle_time": 0, "responses": []} | _error_fields(error)
    ids = {name: topic_id for topic_id, name in (await names_by_id(connection)).items()}
    responses = []
    for topic in request.topics:
        name = topic.topic_name
        error = None
        for stored_topic, partition in stored:
            if stored_topic == name and error is None:
                error = await _reset(connection, group_id, name, partition, None)
        responses.append(
            {"topic_name": name, "topic_id": ids.get(name, ZERO_UUID)} | _error_fields(error)
        )
    return {"throttle_time": 0, "responses": responses} | _error_fields(None)


async def _reset(connection, group_id, topic, partition, start) -> Exception | None:
    try:
        connection.check("READ", "topic", topic)
        await admin.reset(connection.broker, group_id, topic, partition, start)
    except Exception as error:
        return error
    return None


def _error_fields(error: Exception | None) -> dict:
    if error is None:
        return {"error_code": ErrorCode.none, "error_message": None}
    return {"error_code": error_code(error), "error_message": error_message(error)}
