"""Stateless fetch: `GET /topics/{t}/partitions/{p}/records?offset=&max_bytes=&timeout=`.

A long-poll: returns as soon as at least one record exists at `offset`, else after `timeout` ms
with `[]`. Records carry timestamp and headers, which the Confluent v2 API leaves out.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from api.core.records import FetchRequest
from api.http.deps import BrokerDep
from api.http.forwarding import SERVED_BY_HEADER, proxy_to_leader
from api.http.wire import RECORD_MEDIA_TYPES, fetch_format, records_to_json

router = APIRouter(tags=["records"])


@router.get(
    "/topics/{topic}/partitions/{partition}/records",
    summary="Fetch records from an offset (long-poll)",
    responses={200: {"content": {media: {} for media in RECORD_MEDIA_TYPES.values()}}},
)
async def fetch_records(
    topic: str,
    partition: int,
    request: Request,
    broker: BrokerDep,
    offset: Annotated[int, Query(ge=0, description="First offset to return")],
    max_bytes: Annotated[int | None, Query(gt=0, description="Bytes of keys+values")] = None,
    timeout: Annotated[int, Query(ge=0, description="Wait for data, in ms")] = 0,
) -> Response:
    embedded = fetch_format(request.headers.get("accept"))
    settings = broker.settings
    fetch = FetchRequest(
        topic=topic,
        partition=partition,
        offset=offset,
        bytes_max=min(max_bytes or settings.fetch_bytes_max_default, settings.fetch_bytes_max_cap),
        timeout_ms=min(timeout, settings.fetch_timeout_ms_max),
    )
    leader_url = await broker.remote_leader_url(topic, partition)
    if leader_url is None:
        result = await broker.fetch(fetch)
    else:
        result = await broker.read_as_follower(fetch)
        if result is None:  # the head: the leader's tail and long-poll answer
            return await proxy_to_leader(request, broker, leader_url)
    body = records_to_json(result.records, topic=topic, partition=partition, embedded=embedded)
    served_by = {SERVED_BY_HEADER: str(settings.node_id)}
    return Response(body, media_type=RECORD_MEDIA_TYPES[embedded], headers=served_by)
