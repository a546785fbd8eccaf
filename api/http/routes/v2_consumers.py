"""Confluent REST v2 consumer API: `/consumers/{group}` and its instances.

Every route first finds the group's coordinator node; another node's request is forwarded
there, so any node serves any instance (the REST Proxy's instances are sticky to one node).
Paths also work with a trailing slash, as Karapace accepts them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated

import orjson
from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from api.core.groups.group import Subscription
from api.http import access
from api.http.consumer_instances import InstanceConfig
from api.http.deps import BrokerDep, ConsumersDep, base_url
from api.http.errors import ApiError
from api.http.forwarding import served_by_coordinator
from api.http.routes import dead_letter_body
from api.http.routes.dead_letter_body import DeadLetterBody
from api.http.wire import RECORD_MEDIA_TYPES, fetch_format, iso_to_ms, parse_json
from storage_layout.records import TopicPartition

router = APIRouter(tags=["consumers (v2)"])

V2_TYPE = "application/vnd.kafka.v2+json"
INSTANCE = "/consumers/{group}/instances/{instance}"


def _routes(method: str, path: str, **kwargs) -> Callable:
    """Register `path` and, hidden from the docs, `path/`."""

    def register(function: Callable) -> Callable:
        router.add_api_route(path, function, methods=[method], **kwargs)
        router.add_api_route(
            path + "/", function, methods=[method], include_in_schema=False, **kwargs
        )
        return function

    return register


def _no_content() -> Response:
    return Response(status_code=204)


def _json(body: object, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type=V2_TYPE)


async def _body(request: Request, *, required: bool = True) -> dict:
    raw = await request.body()
    if not raw.strip() and not required:
        return {}
    document = parse_json(raw)
    if not isinstance(document, dict):
        raise ApiError(422, 422, "The request body must be a JSON object.")
    return document


# ---- instances -------------------------------------------------------------------------------


@_routes("POST", "/consumers/{group}", summary="Create a consumer instance")
@served_by_coordinator
async def create_instance(
    group: str, request: Request, broker: BrokerDep, consumers: ConsumersDep
) -> Response:
    config = InstanceConfig.parse(await _body(request, required=False))
    await consumers.create(group, config)
    access.bind_instance(request, group, config.name)  # only its creator may use it
    base = base_url(request, broker.settings)
    uri = f"{base}/consumers/{group}/instances/{config.name}"
    return _json({"instance_id": config.name, "base_uri": uri})


@_routes("DELETE", INSTANCE, summary="Delete a consumer instance (leaves its group)")
@served_by_coordinator
async def delete_instance(
    group: str, instance: str, request: Request, broker: BrokerDep, consumers: ConsumersDep
):
    await consumers.delete(group, instance)
    access.unbind_instance(request, group, instance)
    return _no_content()


# ---- subscription and assignments ---------------------------------------------------------------


@_routes("POST", INSTANCE + "/subscription", summary="Subscribe to topics or a topic pattern")
@served_by_coordinator
async def subscribe(
    group: str, instance: str, request: Request, broker: BrokerDep, consumers: ConsumersDep
):
    subscription = _subscription(await _body(request))
    access.require_topics(request, "READ", subscription.topics or ())
    await consumers.subscribe(group, instance, subscription)
    return _no_content()


@_routes("GET", INSTANCE + "/subscription", summary="Subscribed topics")
@served_by_coordinator
async def get_subscription(
    group: str, instance: str, request: Request, broker: BrokerDep, consumers: ConsumersDep
):
    return _json({"topics": consumers.subscribed_topics(group, instance)})


@_routes("DELETE", INSTANCE + "/subscription", summary="Unsubscribe (leave the group)")
@served_by_coordinator
async def unsubscribe(
    group: str, instance: str, request: Request, broker: BrokerDep, consumers: ConsumersDep
):
    await consumers.unsubscribe(group, instance)
    return _no_content()


@_routes("POST", INSTANCE + "/assignments", summary="Assign partitions manually")
@served_by_coordinator
async def assign(
    group: str, instance: str, request: Request, broker: BrokerDep, consumers: ConsumersDep
):
    partitions = _partitions(await _body(request))
    access.require_topics(request, "READ", (tp.topic for tp in partitions))
    await consumers.assign(group, instance, partitions)
    return _no_content()


@_routes("GET", INSTANCE + "/assignments", summary="Partitions assigned to the instance")
@served_by_coordinator
async def get_assignments(
    group: str, instance: str, request: Request, broker: BrokerDep, consumers: ConsumersDep
):
    partitions = await consumers.assignment(group, instance)
    return _json({"partitions": [_tp(tp) for tp in partitions]})


# ---- positions -------------------------------------------------------------------------------


@_routes("POST", INSTANCE + "/positions", summary="Seek to offsets or timestamps")
@served_by_coordinator
async def seek(
    group: str, instance: str, request: Request, broker: BrokerDep, consumers: ConsumersDep
):
    body = await _body(request)
    if "timestamps" in body:
        timestamps = {
            _tp_of(item): _timestamp_ms(item.get("timestamp")) for item in _list(body, "timestamps")
        }
        await consumers.seek_timestamps(group, instance, timestamps)
    else:
        offsets = {_tp_of(item): _int(item, "offset") for item in _list(body, "offsets")}
        await consumers.seek(group, instance, offsets)
    return _no_content()


@_routes("POST", INSTANCE + "/positions/beginning", summary="Seek to the beginning")
@served_by_coordinator
async def seek_beginning(
    group: str, instance: str, request: Request, broker: BrokerDep, consumers: ConsumersDep
):
    partitions = _partitions(await _body(request))
    await consumers.seek_to(group, instance, partitions, end=False)
    return _no_content()


@_routes("POST", INSTANCE + "/positions/end", summary="Seek to the end")
@served_by_coordinator
async def seek_end(
    group: str, instance: str, request: Request, broker: BrokerDep, consumers: ConsumersDep
):
    partitions = _partitions(await _body(request))
    await consumers.seek_to(group, instance, partitions, end=True)
    return _no_content()


# ---- records and offsets ---------------------------------------------------------------------


@_routes("GET", INSTANCE + "/records", summary="Fetch records (returns as soon as any arrive)")
@served_by_coordinator
async def get_records(
    group: str,
    instance: str,
    request: Request,
    broker: BrokerDep,
    consumers: ConsumersDep,
    timeout: Annotated[int | None, Query(ge=0, description="Longest wait in ms")] = None,
    max_bytes: Annotated[int | None, Query(gt=0, description="Bytes of keys and values")] = None,
) -> Response:
    embedded = fetch_format(request.headers.get("accept"))
    accept = (request.headers.get("accept") or "*/*").lower()
    if "vnd.kafka." not in accept or "v2+json" not in accept:
        embedded = consumers.get(group, instance).config.embedded  # generic Accept
    settings = broker.settings
    if access.acls_enabled(request):  # Kafka's Fetch: READ on every topic fetched
        assigned = await consumers.assignment(group, instance)
        access.require_topics(request, "READ", (tp.topic for tp in assigned))
    items = await consumers.records(
        group,
        instance,
        timeout_ms=timeout,
        bytes_max=min(max_bytes or settings.fetch_bytes_max_default, settings.fetch_bytes_max_cap),
        embedded=embedded,
    )
    return Response(orjson.dumps(items), media_type=RECORD_MEDIA_TYPES[embedded])


@_routes("POST", INSTANCE + "/offsets", summary="Commit offsets (last consumed; empty = all)")
@served_by_coordinator
async def commit_offsets(
    group: str, instance: str, request: Request, broker: BrokerDep, consumers: ConsumersDep
):
    body = await _body(request, required=False)
    offsets = {
        _tp_of(item): (_int(item, "offset"), item.get("metadata"))
        for item in (_list(body, "offsets") if body.get("offsets") is not None else [])
    }
    access.require_topics(request, "READ", (tp.topic for tp in offsets))
    await consumers.commit(group, instance, offsets)
    return _json([])


@_routes(
    "POST",
    INSTANCE + "/dead-letters",
    summary="Send a record to the dead letter topic and commit its offset past it (lakelog)",
)
@served_by_coordinator
async def dead_letter(
    group: str,
    instance: str,
    body: DeadLetterBody,
    request: Request,
    broker: BrokerDep,
    consumers: ConsumersDep,
):
    report = body.report()
    await dead_letter_body.authorize(request, broker, report)
    ack = await consumers.dead_letter(group, instance, report)
    return _json(dead_letter_body.ack_body(ack))


@_routes("GET", INSTANCE + "/offsets", summary="Committed offsets (JSON body lists partitions)")
@served_by_coordinator
async def get_offsets(
    group: str, instance: str, request: Request, broker: BrokerDep, consumers: ConsumersDep
):
    body = await _body(request, required=False)
    if "partitions" not in body:
        raise ApiError(
            404, 40402, 'List the partitions in the request body: {"partitions": [...]}.'
        )
    committed = await consumers.committed(group, instance, _partitions(body))
    offsets = [
        {
            **_tp(tp),
            "offset": -1 if stored is None else stored.offset,
            "metadata": None if stored is None else stored.metadata,
        }
        for tp, stored in committed.items()
    ]
    return _json({"offsets": offsets})


# ---- body parsing ------------------------------------------------------------------------------


def _subscription(body: dict) -> Subscription:
    topics, pattern = body.get("topics"), body.get("topic_pattern")
    if topics is not None and pattern is not None:
        raise ApiError(
            409,
            40903,
            "Illegal state: Subscription to topics, partitions and pattern are mutually exclusive",
        )
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern:
            raise ApiError(422, 422, "topic_pattern must be a non-empty regular expression.")
        try:
            re.compile(pattern)
        except re.error as error:
            raise ApiError(422, 422, f"topic_pattern is not a valid regex: {error}.") from None
        return Subscription(pattern=pattern)
    if not isinstance(topics, list) or not topics or not all(isinstance(t, str) for t in topics):
        raise ApiError(422, 422, "topics must be a non-empty list of topic names.")
    return Subscription(topics=frozenset(topics))


def _list(body: dict, name: str) -> list[dict]:
    items = body.get(name)
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ApiError(422, 422, f"'{name}' must be a list of objects.")
    return items


def _partitions(body: dict) -> list[TopicPartition]:
    return [_tp_of(item) for item in _list(body, "partitions")]


def _tp_of(item: dict) -> TopicPartition:
    topic, partition = item.get("topic"), item.get("partition")
    if not isinstance(topic, str) or not isinstance(partition, int) or isinstance(partition, bool):
        raise ApiError(
            422, 422, f"Each entry needs a string 'topic' and an integer 'partition': {item}"
        )
    return TopicPartition(topic, partition)


def _int(item: dict, name: str) -> int:
    value = item.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(422, 422, f"'{name}' must be an integer in {item}.")
    return value


def _timestamp_ms(value: object) -> int:
    """ISO-8601 (Confluent; without a zone: UTC) or epoch milliseconds."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and (parsed_ms := iso_to_ms(value)) is not None:
        return parsed_ms
    raise ApiError(422, 422, f"'timestamp' must be ISO-8601 or epoch ms, not {value!r}.")


def _tp(tp: TopicPartition) -> dict:
    return {"topic": tp.topic, "partition": tp.partition}
