"""Confluent REST Proxy v2 produce: `POST /topics/{t}` and `/topics/{t}/partitions/{p}`."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from api.broker.broker import ProduceRecord, RecordAck
from api.deps import BrokerDep
from api.errors import JSON_TYPE, status_for
from api.wire import parse_v2_produce, produce_format

router = APIRouter(tags=["v2 produce"])

_BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            media: {
                "schema": {
                    "type": "object",
                    "required": ["records"],
                    "properties": {
                        "records": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "key": {},
                                    "value": {},
                                    "partition": {"type": "integer"},
                                    "timestamp": {"type": ["integer", "string"]},
                                    "headers": {"type": "array", "items": {"type": "object"}},
                                },
                            },
                        }
                    },
                }
            }
            for media in (
                "application/vnd.kafka.binary.v2+json",
                "application/vnd.kafka.json.v2+json",
            )
        },
    }
}


@router.post("/topics/{topic}", summary="Produce records", openapi_extra=_BODY_DOC)
async def produce(topic: str, request: Request, broker: BrokerDep) -> Response:
    return await _produce(topic, None, request, broker)


@router.post(
    "/topics/{topic}/partitions/{partition}",
    summary="Produce records to one partition",
    openapi_extra=_BODY_DOC,
)
async def produce_partition(topic: str, partition: int, request: Request, broker: BrokerDep):
    return await _produce(topic, partition, request, broker)


async def _produce(topic: str, partition: int | None, request: Request, broker: BrokerDep):
    embedded = produce_format(request.headers.get("content-type"))
    info = await broker.topic(topic)  # unknown topic is 404 before the body is parsed
    if partition is not None:
        info.check_partition(partition)
    records = parse_v2_produce(
        await request.body(),
        embedded,
        partition_in_url=partition is not None,
        records_max=broker.settings.records_per_request_max,
    )
    if partition is not None:
        records = [ProduceRecord(partition, r.record) for r in records]
    results = await broker.produce(topic, records)
    status = _status(results)
    return Response(orjson.dumps(_response(results, status)), status, media_type=JSON_TYPE)


def _response(results, status: int) -> dict:
    body = {
        "key_schema_id": None,
        "value_schema_id": None,
        "offsets": [_offset_entry(result) for result in results],
    }
    if status != 200:
        # Every record failed: also Confluent's error body, so generic clients see the cause.
        first = body["offsets"][0]
        body = {"error_code": first["error_code"], "message": first["error"], **body}
    return body


def _offset_entry(result: RecordAck | Exception) -> dict:
    if isinstance(result, RecordAck):
        return {
            "partition": result.partition,
            "offset": result.offset,
            "error_code": None,
            "error": None,
        }
    # Per-record codes as Confluent reports them: unknown topic/partition as in the v2 API,
    # 50003 retriable, 50002 any other failure.
    code = status_for(result)[1]
    if code not in (40401, 40402):
        code = 50003 if getattr(result, "retriable", False) else 50002
    return {"partition": None, "offset": None, "error_code": code, "error": str(result)}


def _status(results) -> int:
    """200 if any record was written (Confluent keeps 200 on partial failure); when every
    record failed, the status of the first failure (e.g. 413, 404, 503)."""
    failures = [r for r in results if not isinstance(r, RecordAck)]
    if len(failures) < len(results):
        return 200
    return status_for(failures[0])[0]
