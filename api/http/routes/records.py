"""Stateless fetch: `GET /topics/{t}/partitions/{p}/records?offset=&max_bytes=&timeout=`.

A long-poll: returns as soon as at least one record exists at `offset`, else after `timeout` ms
with `[]`. Records carry timestamp and headers, which the Confluent v2 API leaves out.

`isolation.level=read_committed` returns committed records only, below the last stable offset
(aborted records and transaction markers are left out). Either way the `x-lakelog-next-offset`
header says where to read next: past rows this read left out, so a reader that goes on from
there never stalls on an aborted transaction or a marker. Absent: nothing was read.
"""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from api.core.records import FetchRequest
from api.http.deps import BrokerDep
from api.http.errors import ApiError
from api.http.forwarding import NEXT_OFFSET_HEADER, SERVED_BY_HEADER, proxy_to_leader
from api.http.wire import (
    BINARY,
    RECORD_MEDIA_TYPES,
    SCHEMA_FORMATS,
    fetch_format,
    records_to_items,
    records_to_json,
)
from storage_layout.records import Isolation

router = APIRouter(tags=["records"])
INVALID_ISOLATION_LEVEL = 42215


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
    isolation_level: Annotated[
        str,
        Query(
            alias="isolation.level",
            description="read_uncommitted (default) or read_committed (committed records only)",
        ),
    ] = "read_uncommitted",
    decode: Annotated[
        str | None,
        Query(
            description="lakelog extension: `schemas` adds, to binary records whose key or value "
            "names a registered schema, `key_schema_id`/`key_decoded` and "
            "`value_schema_id`/`value_decoded` (the console's message browser)",
            pattern="^schemas$",
        ),
    ] = None,
) -> Response:
    embedded = fetch_format(request.headers.get("accept"))
    settings = broker.settings
    fetch = FetchRequest(
        topic=topic,
        partition=partition,
        offset=offset,
        bytes_max=min(max_bytes or settings.fetch_bytes_max_default, settings.fetch_bytes_max_cap),
        timeout_ms=min(timeout, settings.fetch_timeout_ms_max),
        isolation=isolation_from(isolation_level),
    )
    leader_url = await broker.partitions.remote_leader_url(topic, partition)
    if leader_url is None:
        result = await broker.fetch(fetch)
    else:
        result = await broker.read_as_follower(fetch)
        if result is None:  # the head: the leader's tail and long-poll answer
            return await proxy_to_leader(request, broker, leader_url)
    body = await _records_body(request, result.records, topic, partition, embedded, decode)
    headers = {SERVED_BY_HEADER: str(settings.node_id)}
    if result.next_offset is not None:
        headers[NEXT_OFFSET_HEADER] = str(result.next_offset)
    return Response(body, media_type=RECORD_MEDIA_TYPES[embedded], headers=headers)


async def _records_body(
    request: Request, records, topic: str, partition: int, embedded: str, decode: str | None
):
    formats = request.app.state.schema_formats
    if embedded in SCHEMA_FORMATS:
        items = records_to_items(records, topic=topic, partition=partition, embedded=BINARY)
        return orjson.dumps(await formats.decode_items(items, embedded))
    if decode and embedded == BINARY:
        items = records_to_items(records, topic=topic, partition=partition, embedded=BINARY)
        return orjson.dumps(await formats.annotate(items))
    return records_to_json(records, topic=topic, partition=partition, embedded=embedded)


def isolation_from(isolation_level: str) -> Isolation:
    """The data read for Kafka's `isolation.level` value (422 with what to send otherwise)."""
    try:
        return Isolation.for_data_readers(isolation_level)
    except ValueError as error:
        raise ApiError(422, INVALID_ISOLATION_LEVEL, str(error)) from None
