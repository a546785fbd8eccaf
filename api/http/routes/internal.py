"""Node-to-node routes: a non-leader forwards a partition's records to its leader (and Spark
executors hand theirs to it, with their txn); the group list asks every node which groups it
coordinates.

Not part of the public API (hidden from OpenAPI). The leader appends only if it still leads the
partition; it never forwards again, so a request crosses at most one hop.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from api.core.broker import Broker
from api.core.groups.coordinator import GroupDescription
from api.core.groups.errors import GroupNotFound, NotCoordinator
from api.core.peers import travels
from api.core.shares import serving
from api.core.shares.errors import ShareError
from api.core.shares.owner import ShareKey
from api.core.shares.share_partition import AcknowledgeType
from api.core.writer import TransactionMarker
from api.http import share_queue
from api.http.deps import BrokerDep
from api.http.wire import parse_json
from storage_layout.cluster import routes
from storage_layout.cluster.codec import REFUSED_STATUS, decode_append, refusal
from storage_layout.meta.consumer_offsets import offset_commit_from

router = APIRouter(include_in_schema=False)


@router.post(routes.APPEND_PATH)
async def append(topic: str, partition: int, request: Request, broker: BrokerDep):
    (await broker.topics.get(topic)).check_partition(partition)
    append_request = decode_append(parse_json(await request.body()))
    try:
        pending = await broker.submit(
            topic,
            partition,
            list(append_request.records),
            producer=append_request.producer,
            transaction=append_request.transaction,
            forward=False,
        )
        ack = await pending
    except Exception as error:  # the sequence verdict travels back to the forwarding node
        return _refused(error)
    return {
        "base_offset": ack.base_offset,
        "append_time_ms": ack.append_time_ms,
        "duplicate": ack.duplicate,
    }


@router.post(routes.MARKER_PATH)
async def marker(topic: str, partition: int, request: Request, broker: BrokerDep):
    (await broker.topics.get(topic)).check_partition(partition)
    body = parse_json(await request.body())
    marker = TransactionMarker(body["producer_id"], body["epoch"], body["control"])
    try:
        await broker.transaction_participants.write_marker(topic, partition, marker, forward=False)
    except Exception as error:
        return _refused(error)
    return {}


@router.post(routes.TRANSACTION_PATH)
async def transaction_request(operation: str, request: Request, broker: BrokerDep):
    """A transactional producer's request for the id's coordinator (this node)."""
    body = parse_json(await request.body())
    try:
        return await broker.transaction_requests.serve(operation, body)
    except Exception as error:
        return _refused(error)


@router.post(routes.TRANSACTION_OFFSETS_PATH)
async def transaction_offsets(group: str, request: Request, broker: BrokerDep):
    body = parse_json(await request.body())
    commits = [offset_commit_from(offset) for offset in body["offsets"]]
    await broker.transaction_participants.end_offsets(group, commits, body["producer_id"])
    return {}


@router.post(routes.SHARE_ACQUIRE_PATH)
async def share_acquire(topic: str, partition: int, request: Request, broker: BrokerDep):
    """Records of a share partition this node leads, acquired for an HTTP member."""
    body = parse_json(await request.body())
    key = await serving.share_key(broker, body["group_id"], topic, partition)
    delivery = await serving.acquire_here(
        broker,
        key,
        body["member_id"],
        records_max=body["records_max"],
        bytes_max=body["bytes_max"],
        lock_duration_ms=body.get("lock_duration_ms"),
    )
    return {"records": share_queue.delivery_items(delivery, body["member_id"], body["embedded"])}


@router.post(routes.SHARE_ACKNOWLEDGE_PATH)
async def share_acknowledge(topic: str, partition: int, request: Request, broker: BrokerDep):
    """An HTTP member's acknowledgements of a share partition this node leads; a refusal of
    the records (InvalidRecordState) is an answer, not a failure of the call."""
    body = parse_json(await request.body())
    acknowledgements = [
        (share_queue.DeliveryId(topic, body["topic_id"], partition, o, c, body["member_id"]), k)
        for o, k, c in body["acknowledgements"]
    ]
    try:
        await share_queue.acknowledge_here(
            broker, body["group_id"], [(d, AcknowledgeType(k)) for d, k in acknowledgements]
        )
    except ShareError as refused:
        return {"refused": type(refused).__name__, "message": str(refused)}
    return {}


@router.post(routes.SHARE_RESET_PATH)
async def share_reset(topic: str, partition: int, request: Request, broker: BrokerDep):
    """An administrator's reset of a share partition this node leads (never forwarded)."""
    body = parse_json(await request.body())
    key = ShareKey(body["group_id"], topic, partition, body["topic_id"])
    await serving.reset_here(broker, key, body["start_offset"])
    return {}


@router.get(routes.GROUPS_PATH)
async def local_groups(broker: BrokerDep) -> dict:
    return {"node_id": broker.groups.node_id, "groups": await local_group_summaries(broker)}


async def local_group_summaries(broker: Broker) -> list[dict]:
    """The groups this node coordinates that exist (members or committed offsets), each as
    `{group_id, state, protocol, members (count), coordinator (node id)}`."""
    summaries = []
    for group_id in sorted(broker.groups.local_groups()):
        try:
            description = await broker.groups.describe(group_id)
        except (GroupNotFound, NotCoordinator):  # looked up but never used, or handed over
            continue
        summaries.append(group_summary(description))
    return summaries


def group_summary(description: GroupDescription) -> dict:
    return {
        "group_id": description.group_id,
        "state": description.state,  # GroupState's value, e.g. "Stable"
        "type": description.group_type,  # "classic" or "consumer" (KIP-848)
        "protocol": description.protocol,
        "members": len(description.members),
        "coordinator": description.coordinator_id,
    }


def _refused(error: Exception) -> JSONResponse:
    """An error the calling node raises as itself (peers.travels) as a refusal; any other
    one is raised here, and answered as every route's errors are."""
    if not travels(error):
        raise error
    return JSONResponse(refusal(error), status_code=REFUSED_STATUS)
