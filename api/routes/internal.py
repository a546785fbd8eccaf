"""Node-to-node routes: a non-leader forwards a partition's records to its leader.

Not part of the public API (hidden from OpenAPI). The leader appends only if it still leads the
partition; it never forwards again, so a request crosses at most one hop.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from api.broker.broker import INTERNAL_APPEND_PATH, decode_batch
from api.deps import BrokerDep
from api.wire import parse_json

router = APIRouter(include_in_schema=False)


@router.post(INTERNAL_APPEND_PATH)
async def append(topic: str, partition: int, request: Request, broker: BrokerDep) -> dict:
    (await broker.topic(topic)).check_partition(partition)
    batch = decode_batch(parse_json(await request.body()))
    ack = await broker.append(topic, partition, batch, forward=False)
    return {"base_offset": ack.base_offset, "append_time_ms": ack.append_time_ms}
