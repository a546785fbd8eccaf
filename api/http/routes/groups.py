"""lakelog's native consumer group API, for clients that run their own poll loop.

Kafka's group protocol over HTTP: join (long-polls until the rebalance completes and returns the
assignment, which the coordinator computes: no leader-side assignor is needed), sync, heartbeat,
leave, and offset commit/fetch. Offsets here have Kafka's native meaning: the next offset to
read. Records are read with the stateless fetch, `GET /topics/{t}/partitions/{p}/records`.
Any node serves any group (requests are forwarded to the group's coordinator). A member that
gives up on a record sends it to the dead letter topic and commits past it in one call
(`POST /groups/{g}/dead-letters`, api/core/groups/dead_letters.py).
"""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from api.core.groups.assignors import ASSIGNORS
from api.core.groups.coordinator import JoinResult
from api.core.groups.dead_letters import DeadLetterRequest, send_dead_letter
from api.core.groups.group import JoinRequest, MemberView, Subscription
from api.http import access
from api.http.deps import BrokerDep
from api.http.errors import ApiError
from api.http.forwarding import served_by_coordinator
from api.http.routes import dead_letter_body
from api.http.routes.dead_letter_body import DeadLetterBody
from api.http.wire import INT32_MAX, INT32_MIN, INT64_MAX
from storage_layout.meta.consumer_offsets import OffsetCommit
from storage_layout.records import TopicPartition

router = APIRouter(prefix="/groups", tags=["consumer groups (native)"])


class JoinBody(BaseModel):
    member_id: str | None = Field(None, description="Empty or absent for a new member")
    group_instance_id: str | None = Field(None, description="Static membership id")
    client_id: str = ""
    session_timeout_ms: int = Field(
        45_000, ge=INT32_MIN, le=INT32_MAX, description="Kafka's session.timeout.ms"
    )
    rebalance_timeout_ms: int = Field(
        300_000, ge=INT32_MIN, le=INT32_MAX, description="Kafka's max.poll.interval.ms"
    )
    topics: list[str] | None = None
    topic_pattern: str | None = None
    assignors: list[str] = Field(["range", "cooperative-sticky"], description=str(ASSIGNORS))


class GenerationBody(BaseModel):
    generation_id: int = Field(ge=INT32_MIN, le=INT32_MAX)


class OffsetBody(BaseModel):
    topic: str
    partition: int = Field(ge=0, le=INT32_MAX)
    offset: int = Field(ge=0, le=INT64_MAX, description="The next offset to read (Kafka's meaning)")
    metadata: str | None = None


class CommitBody(BaseModel):
    member_id: str | None = None
    generation_id: int = Field(
        -1,
        ge=INT32_MIN,
        le=INT32_MAX,
        description="-1 (with no member) only for an empty group",
    )
    offsets: list[OffsetBody] = Field(min_length=1)


def _json(body: object, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


@router.post("/{group}/members", summary="Join (long-polls until the rebalance completes)")
@served_by_coordinator
async def join(group: str, body: JoinBody, request: Request, broker: BrokerDep) -> Response:
    result = await broker.groups.join(group, _join_request(body))
    return _json(_join_result(result))


@router.post("/{group}/members/{member}/sync", summary="The member's assignment")
@served_by_coordinator
async def sync(
    group: str, member: str, body: GenerationBody, request: Request, broker: BrokerDep
) -> Response:
    assignment = await broker.groups.sync(group, member, body.generation_id)
    return _json({"generation_id": body.generation_id, "assignment": _partitions(assignment)})


@router.post(
    "/{group}/members/{member}/heartbeat",
    summary="Keep the session (409 40912 REBALANCE_IN_PROGRESS: join again)",
)
@served_by_coordinator
async def heartbeat(
    group: str, member: str, body: GenerationBody, request: Request, broker: BrokerDep
) -> Response:
    await broker.groups.heartbeat(group, member, body.generation_id)
    return Response(status_code=204)


@router.delete("/{group}/members/{member}", summary="Leave the group")
@served_by_coordinator
async def leave(group: str, member: str, request: Request, broker: BrokerDep) -> Response:
    await broker.groups.leave(group, member)
    return Response(status_code=204)


@router.post("/{group}/offsets", summary="Commit offsets (next offset to read)")
@served_by_coordinator
async def commit(group: str, body: CommitBody, request: Request, broker: BrokerDep) -> Response:
    access.require_topics(request, "READ", (o.topic for o in body.offsets))
    commits = [OffsetCommit(o.topic, o.partition, o.offset, o.metadata) for o in body.offsets]
    await broker.groups.commit(
        group, commits, member_id=body.member_id, generation=body.generation_id
    )
    return Response(status_code=204)


class GroupDeadLetterBody(DeadLetterBody):
    member_id: str | None = Field(None, description="Absent, with generation -1: no member")
    generation_id: int = Field(
        -1,
        ge=INT32_MIN,
        le=INT32_MAX,
        description="-1 (with no member) only for an empty group",
    )


@router.post(
    "/{group}/dead-letters",
    summary="Send a record to the dead letter topic and commit its offset past it",
)
@served_by_coordinator
async def dead_letter(
    group: str, body: GroupDeadLetterBody, request: Request, broker: BrokerDep
) -> Response:
    report = body.report()
    await dead_letter_body.authorize(request, broker, report)
    member_id = body.member_id or None
    ack = await send_dead_letter(
        broker, DeadLetterRequest(group, member_id, body.generation_id, report)
    )
    return _json(dead_letter_body.ack_body(ack))


@router.get("/{group}/offsets", summary="Committed offsets")
@served_by_coordinator
async def committed(group: str, request: Request, broker: BrokerDep) -> Response:
    stored = await broker.groups.committed(group)
    offsets = [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "offset": o.offset,
            "metadata": o.metadata,
            "generation_id": o.generation,
            "member_id": o.member_id,
            "committed_at_ms": o.committed_at_ms,
        }
        for tp, o in sorted(stored.items())
    ]
    return _json({"offsets": offsets})


@router.delete(
    "/{group}",
    status_code=204,
    summary="Delete a group without members and its committed offsets (Kafka's DeleteGroups)",
)
@served_by_coordinator
async def delete(group: str, request: Request, broker: BrokerDep) -> Response:
    await broker.groups.delete_group(group)
    return Response(status_code=204)


@router.get("/{group}", summary="Describe a group")
@served_by_coordinator
async def describe(group: str, request: Request, broker: BrokerDep) -> Response:
    description = await broker.groups.describe(group)
    return _json(
        {
            "group_id": description.group_id,
            "state": description.state,
            "generation_id": description.generation,
            "protocol": description.protocol,
            "leader_id": description.leader_id,
            "coordinator": description.coordinator_id,
            "members": [_member(m) for m in description.members],
        }
    )


def _join_request(body: JoinBody) -> JoinRequest:
    if (body.topics is None) == (body.topic_pattern is None):
        raise ApiError(422, 42212, "Give exactly one of 'topics' and 'topic_pattern'.")
    subscription = (
        Subscription(pattern=body.topic_pattern)
        if body.topic_pattern is not None
        else Subscription(topics=frozenset(body.topics))
    )
    unknown = [a for a in body.assignors if a not in ASSIGNORS]
    if unknown:
        raise ApiError(422, 42212, f"Unknown assignor(s) {unknown}: use some of {ASSIGNORS}.")
    return JoinRequest(
        member_id=body.member_id or None,
        client_id=body.client_id,
        group_instance_id=body.group_instance_id or None,
        session_timeout_ms=body.session_timeout_ms,
        rebalance_timeout_ms=body.rebalance_timeout_ms,
        subscription=subscription,
        assignors=tuple(body.assignors),
    )


def _join_result(result: JoinResult) -> dict:
    return {
        "member_id": result.member_id,
        "generation_id": result.generation,
        "protocol": result.protocol,
        "leader_id": result.leader_id,
        "assignment": _partitions(result.assignment),
        "members": [_member(m) for m in result.members],
    }


def _member(member: MemberView) -> dict:
    return {
        "member_id": member.member_id,
        "client_id": member.client_id,
        "group_instance_id": member.group_instance_id,
        "assignment": _partitions(member.assignment),
    }


def _partitions(partitions: tuple[TopicPartition, ...]) -> list[dict]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]
