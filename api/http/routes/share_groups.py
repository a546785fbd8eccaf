"""Share groups over HTTP (a lakelog extension: Confluent's REST Proxy has no queues): acquire
records of a share group's topics, acknowledge them one by one, see the group's share
partitions and set its configs (Kafka's GROUP config resource).

    POST /v3/clusters/{c}/share-groups/{group}/records:acquire
         {"topics": ["orders"], "max_records": 100, "timeout_ms": 1000,
          "lock_duration_ms": 30000, "member_id": "...", "format": "binary"}
      -> {"member_id": ..., "records": [{..., "delivery_id", "delivery_count"}]}
    POST /v3/clusters/{c}/share-groups/{group}/records:acknowledge
         {"acknowledgements": [{"delivery_id": "...", "type": "accept"}]}
         types: accept, release (deliver again), reject (archive; dead-letter), renew (extend)

Any node answers: each share partition is served by its topic partition's leader
(api/http/share_queue.py). An acknowledgement request applies each share partition's
acknowledgements all or none; if any is refused, the answer is that error's status with
`results` saying which delivery ids were applied and which were not.
"""

from __future__ import annotations

import uuid

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from api.core.group_configs import ConfigEntry
from api.core.groups.errors import GroupNotFound
from api.core.shares import admin
from api.core.shares.membership import ShareGroupView
from api.core.shares.share_partition import AcknowledgeType, RecordState
from api.http import access, share_queue
from api.http.deps import BrokerDep, base_url
from api.http.errors import ApiError, error_body, status_for
from api.http.forwarding import served_by_coordinator
from api.http.routes.v3_topics import check_cluster, list_body
from api.http.share_queue import Acquisition
from api.http.wire import BINARY, RECORD_MEDIA_TYPES, parse_json
from storage_layout.meta.share_states import ShareBatch

router = APIRouter(prefix="/v3/clusters/{cluster_id}/share-groups", tags=["share groups"])

RECORDS_MAX = 10_000  # one acquisition's records at most
DEFAULT_RECORDS = 100
DEFAULT_TIMEOUT_MS = 1_000
TIMEOUT_MAX_MS = 30_000
LOCK_MS_MIN, LOCK_MS_MAX = 1_000, 3_600_000
_TYPES = {t.name.lower(): t for t in AcknowledgeType if t != AcknowledgeType.GAP}


def _bad(message: str) -> ApiError:
    return ApiError(400, 40002, message)


def _int(body: dict, name: str, default: int | None, low: int, high: int) -> int | None:
    value = body.get(name, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _bad(f"'{name}' must be a whole number from {low} to {high}, not {value!r}.")
    return value


def _topics(body: dict) -> list[str]:
    topics = body.get("topics")
    if topics is None and "topic" in body:
        topics = [body["topic"]]
    if not isinstance(topics, list) or not topics or not all(isinstance(t, str) for t in topics):
        raise _bad("Name the topics to acquire from: 'topics' is a non-empty list of names.")
    return list(dict.fromkeys(topics))


def _acquisition(group: str, body: dict, bytes_max: int) -> Acquisition:
    embedded = body.get("format", BINARY)
    if embedded not in RECORD_MEDIA_TYPES:
        raise _bad(f"'format' is one of {', '.join(RECORD_MEDIA_TYPES)}, not {embedded!r}.")
    member_id = body.get("member_id") or f"http-{uuid.uuid4()}"
    if not isinstance(member_id, str) or len(member_id) > 255:
        raise _bad("'member_id' is a string of at most 255 characters.")
    return Acquisition(
        group_id=group,
        member_id=member_id,
        topics=_topics(body),
        records_max=_int(body, "max_records", DEFAULT_RECORDS, 1, RECORDS_MAX),
        bytes_max=_int(body, "max_bytes", bytes_max, 1, bytes_max),
        lock_duration_ms=_int(body, "lock_duration_ms", None, LOCK_MS_MIN, LOCK_MS_MAX),
        timeout_ms=_int(body, "timeout_ms", DEFAULT_TIMEOUT_MS, 0, TIMEOUT_MAX_MS),
        embedded=embedded,
    )


@router.post("/{group}/records:acquire", summary="Acquire records (locked until acknowledged)")
async def acquire(cluster_id: str, group: str, request: Request, broker: BrokerDep) -> Response:
    check_cluster(cluster_id, broker.settings)
    body = _object(parse_json(await request.body()))
    acquisition = _acquisition(group, body, broker.settings.fetch_bytes_max_cap)
    access.require_topics(request, "READ", acquisition.topics)
    records = await share_queue.acquire(broker, acquisition)
    answer = {"member_id": acquisition.member_id, "records": records}
    return Response(orjson.dumps(answer), media_type="application/json")


@router.post("/{group}/records:acknowledge", summary="Accept, release, reject or renew records")
async def acknowledge(cluster_id: str, group: str, request: Request, broker: BrokerDep):
    check_cluster(cluster_id, broker.settings)
    body = _object(parse_json(await request.body()))
    acknowledgements = _acknowledgements(body)
    # Kafka's ShareAcknowledge: READ on the group (the route's rule) and on each topic
    topics = {share_queue.DeliveryId.decode(text).topic for text, _ in acknowledgements}
    access.require_topics(request, "READ", topics)
    outcomes = await share_queue.acknowledge(broker, group, acknowledgements)
    results = [
        {"delivery_id": delivery_id} | _error_fields(outcome.error)
        for outcome in outcomes
        for delivery_id in outcome.delivery_ids
    ]
    refused = [o.error for o in outcomes if o.error is not None]
    if not refused:
        return {"results": results}
    status, code = status_for(refused[0], v3=True)
    answer = error_body(code, str(refused[0])) | {"results": results}
    return Response(orjson.dumps(answer), status, media_type="application/json")


def _object(document: object) -> dict:
    if not isinstance(document, dict):
        raise _bad("The body is a JSON object.")
    return document


def _acknowledgements(body: dict) -> list[tuple[str, AcknowledgeType]]:
    items = body.get("acknowledgements")
    if not isinstance(items, list) or not items or len(items) > RECORDS_MAX:
        raise _bad(
            f"'acknowledgements' is a non-empty list of {{delivery_id, type}}, at most "
            f"{RECORDS_MAX}."
        )
    parsed = []
    for item in items:
        kind = item.get("type", "accept") if isinstance(item, dict) else None
        if kind not in _TYPES or not isinstance(item.get("delivery_id"), str):
            raise _bad(
                f"Each acknowledgement is {{delivery_id, type}} with a type of "
                f"{', '.join(_TYPES)}; got {item!r}."
            )
        parsed.append((item["delivery_id"], _TYPES[kind]))
    return parsed


def _error_fields(error: Exception | None) -> dict:
    if error is None:
        return {"error_code": None, "message": None}
    return {"error_code": status_for(error, v3=True)[1], "message": str(error)}


# ---- views -----------------------------------------------------------------------------------


@router.get("", summary="List share groups (those with share-partition state)")
async def list_groups(cluster_id: str, request: Request, broker: BrokerDep) -> dict:
    check_cluster(cluster_id, broker.settings)
    url = f"{base_url(request, broker.settings)}/v3/clusters/{cluster_id}/share-groups"
    groups = await admin.share_group_ids(broker)
    visible = [g for g in groups if access.permits(request, "DESCRIBE", "group", g)]
    data = [{"group_id": g, "metadata": {"self": f"{url}/{g}"}} for g in visible]
    return list_body("ShareGroupList", url, data)


@router.get("/{group}", summary="A share group: members, start offsets, records by state, lag")
@served_by_coordinator
async def describe(cluster_id: str, group: str, request: Request, broker: BrokerDep) -> dict:
    check_cluster(cluster_id, broker.settings)
    try:
        view = await admin.group_view(broker, group)
    except GroupNotFound:
        view = ShareGroupView(group)  # not a share group yet: nothing stored, no members
    partitions = [
        {
            "topic_name": p.topic,
            "partition_id": p.partition,
            "start_offset": p.start_offset,
            "lag": p.lag,
            "records": _counts(p.batches),
        }
        for p in await admin.describe_offsets(broker, group)
    ]
    members = [
        {
            "member_id": m.member_id,
            "client_id": m.client_id,
            "client_host": m.client_host,
            "member_epoch": m.epoch,
            "topics": list(m.topic_names),
        }
        for m in view.members.values()
    ]
    return {
        "kind": "ShareGroup",
        "group_id": group,
        "state": view.state,
        "coordinator": broker.groups.node_id,
        "members": members,
        "partitions": partitions,
    }


@router.post(
    "/{group}/offsets:reset", summary="Start share partitions over (group without members)"
)
@served_by_coordinator
async def reset_offsets(cluster_id: str, group: str, request: Request, broker: BrokerDep):
    check_cluster(cluster_id, broker.settings)
    body = _object(parse_json(await request.body()))
    admin.check_empty(broker, group)
    topics = body.get("topics")
    if not isinstance(topics, list) or not topics or not all(isinstance(t, str) for t in topics):
        raise _bad("'topics' is a non-empty list of topic names.")
    to = body.get("to")
    if to not in ("earliest", "latest") and (not isinstance(to, int) or isinstance(to, bool)):
        raise _bad("'to' is earliest, latest or an offset.")
    access.require_topics(request, "READ", topics)
    results = []
    for topic in topics:
        for partition in range((await broker.topics.get(topic)).partitions):
            start = await admin.reset(broker, group, topic, partition, to)
            results.append({"topic_name": topic, "partition_id": partition, "start_offset": start})
    return {"results": results}


@router.delete("/{group}", summary="Delete a share group without members", status_code=204)
@served_by_coordinator
async def delete(cluster_id: str, group: str, request: Request, broker: BrokerDep):
    check_cluster(cluster_id, broker.settings)
    await admin.delete_group(broker, group)
    return Response(status_code=204)


def _counts(batches: tuple[ShareBatch, ...]) -> dict[str, int]:
    """Records in flight by state, as stored (an expired lock counts as acquired until the
    share partition next changes; its owner treats it as available)."""
    counts = {state.name.lower(): 0 for state in RecordState}
    for batch in batches:
        counts[RecordState(batch.state).name.lower()] += batch.last_offset - batch.first_offset + 1
    return counts


# ---- configs (Kafka's GROUP config resource) ---------------------------------------------------


@router.get("/{group}/configs", summary="The group's configs (Kafka's GroupConfig)")
async def list_configs(cluster_id: str, group: str, request: Request, broker: BrokerDep):
    check_cluster(cluster_id, broker.settings)
    url = f"{base_url(request, broker.settings)}/v3/clusters/{cluster_id}/share-groups/{group}"
    entries = await broker.group_configs.describe(group)
    return list_body("GroupConfigList", f"{url}/configs", [_config(e) for e in entries])


@router.post("/{group}/configs:alter", summary="Set (or, with operation DELETE, reset) configs")
async def alter_configs(cluster_id: str, group: str, request: Request, broker: BrokerDep):
    check_cluster(cluster_id, broker.settings)
    body = _object(parse_json(await request.body()))
    changes = _config_changes(body)
    await broker.group_configs.alter(
        group, lambda _current: changes, validate_only=bool(body.get("validate_only"))
    )
    return Response(status_code=204)


def _config_changes(body: dict) -> dict[str, str | None]:
    data = body.get("data")
    if not isinstance(data, list) or not data:
        raise _bad("'data' is a non-empty list of {name, value, operation}.")
    changes: dict[str, str | None] = {}
    for item in data:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise _bad(f"Each config change is {{name, value, operation}}; got {item!r}.")
        operation = str(item.get("operation", "SET")).upper()
        if operation not in ("SET", "DELETE"):
            raise _bad(f"'operation' is SET or DELETE, not {item.get('operation')!r}.")
        value = item.get("value")
        if operation == "SET" and value is None:
            raise _bad(f"Config '{item['name']}': SET needs a 'value'.")
        changes[item["name"]] = None if operation == "DELETE" else str(value)
    return changes


def _config(entry: ConfigEntry) -> dict:
    return {
        "name": entry.name,
        "value": entry.value,
        "is_default": entry.is_default,
        "source": "DEFAULT_CONFIG" if entry.is_default else "DYNAMIC_GROUP_CONFIG",
    }
