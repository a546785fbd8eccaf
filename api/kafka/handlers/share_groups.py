"""KIP-932's share group membership over Kafka's wire: ShareGroupHeartbeat (join, heartbeat,
leave: the coordinator assigns, api/core/shares/membership.py) and ShareGroupDescribe.
Assignments travel by topic id; the core works with names."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from api.core.shares.membership import ShareGroupView, ShareHeartbeat
from api.kafka.connection import Connection
from api.kafka.errors import error_code, error_message
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
            group = connection.broker.share_members.describe(group_id)
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
