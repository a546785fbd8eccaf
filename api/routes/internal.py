"""Node-to-node routes: a non-leader forwards a partition's records to its leader.

Not part of the public API (hidden from OpenAPI). The leader appends only if it still leads the
partition; it never forwards again, so a request crosses at most one hop.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from api.broker.broker import INTERNAL_APPEND_PATH, decode_batch
from api.deps import BrokerDep
from api.wire import parse_json
from storage_layout.errors import ProducerError

router = APIRouter(include_in_schema=False)


@router.post(INTERNAL_APPEND_PATH)
async def append(topic: str, partition: int, request: Request, broker: BrokerDep):
    (await broker.topic(topic)).check_partition(partition)
    producer, batch = decode_batch(parse_json(await request.body()))
    try:
        pending = await broker.submit(topic, partition, batch, producer=producer, forward=False)
        ack = await pending
    except ProducerError as error:  # the sequence verdict travels back to the forwarding node
        body = {"producer_error": type(error).__name__, "message": str(error)}
        return JSONResponse(body, status_code=409)
    return {"base_offset": ack.base_offset, "append_time_ms": ack.append_time_ms}
