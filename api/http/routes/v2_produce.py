"""Confluent REST Proxy v2 produce: `POST /topics/{t}` and `/topics/{t}/partitions/{p}`."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from api.core.records import RecordAck, RecordQueued
from api.http import access
from api.http.deps import BrokerDep
from api.http.errors import JSON_TYPE, PER_RECORD_CODES, count_error, status_for
from api.http.wire import (
    ACKS_DESCRIPTION,
    ACKS_PATTERN,
    BINARY,
    SCHEMA_FORMATS,
    RecordLimits,
    acks_mode,
    parse_json,
    parse_v2_produce,
    produce_format,
)

AcksQuery = Annotated[str, Query(pattern=ACKS_PATTERN, description=ACKS_DESCRIPTION)]

_IDEMPOTENCE_DOC = (
    "lakelog extension (idempotent produce): `producer_id` and `producer_epoch` from "
    "`POST /v3/clusters/{cluster_id}/producers`, and the first sequence of this request's records "
    'per partition: `base_sequence` on a partition URL, `base_sequences` {"<partition>": int} '
    "on a topic URL (one entry per partition that receives records; its records, in request "
    "order, get consecutive sequences). A retry with the same fields is acknowledged with the "
    "original offsets and not appended again."
)

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
                        },
                        "producer_id": {"type": "integer", "description": _IDEMPOTENCE_DOC},
                        "producer_epoch": {"type": "integer"},
                        "base_sequence": {"type": "integer"},
                        "base_sequences": {
                            "type": "object",
                            "additionalProperties": {"type": "integer"},
                        },
                    },
                }
            }
            for media in (
                "application/vnd.kafka.binary.v2+json",
                "application/vnd.kafka.json.v2+json",
                "application/vnd.kafka.avro.v2+json",
                "application/vnd.kafka.jsonschema.v2+json",
                "application/vnd.kafka.protobuf.v2+json",
            )
        },
    }
}


@router.post("/topics/{topic}", summary="Produce records", openapi_extra=_BODY_DOC)
async def produce(
    topic: str, request: Request, broker: BrokerDep, acks: AcksQuery = "all"
) -> Response:
    return await _produce(topic, None, request, broker, acks)


@router.post(
    "/topics/{topic}/partitions/{partition}",
    summary="Produce records to one partition",
    openapi_extra=_BODY_DOC,
)
async def produce_partition(
    topic: str, partition: int, request: Request, broker: BrokerDep, acks: AcksQuery = "all"
):
    return await _produce(topic, partition, request, broker, acks)


async def _produce(topic, partition: int | None, request: Request, broker: BrokerDep, acks: str):
    embedded = produce_format(request.headers.get("content-type"))
    info = await broker.topics.get(topic)  # unknown topic is 404 before the body is parsed
    if partition is not None:
        info.check_partition(partition)
    body, schema_ids = await request.body(), (None, None)
    if embedded in SCHEMA_FORMATS:  # JSON values serialized with their schemas: binary
        document = parse_json(body)
        if isinstance(document, dict):
            formats = request.app.state.schema_formats
            schema_ids = await formats.v2_records(topic, embedded, document)
            body, embedded = orjson.dumps(document), BINARY
    parsed = parse_v2_produce(
        body,
        embedded,
        partition=partition,
        limits=RecordLimits.from_settings(broker.settings),
    )
    if parsed.idempotence is not None:  # a producer id is bound to who initialised it
        await access.check_producer(request, parsed.idempotence.producer_id)
        access.check_transactional(request, parsed.idempotence)
    results = await broker.produce(
        topic, parsed.records, idempotence=parsed.idempotence, acks=acks_mode(acks)
    )
    status = _status(results)
    answer = _response(results, status, schema_ids)
    return Response(orjson.dumps(answer), status, media_type=JSON_TYPE)


def _response(results, status: int, schema_ids: tuple[int | None, int | None]) -> dict:
    body = {
        "key_schema_id": schema_ids[0],
        "value_schema_id": schema_ids[1],
        "offsets": [_offset_entry(result) for result in results],
    }
    if status >= 300:
        # Every record failed: also Confluent's error body, so generic clients see the cause.
        first = body["offsets"][0]
        body = {"error_code": first["error_code"], "message": first["error"], **body}
    return body


def _offset_entry(result: RecordAck | RecordQueued | Exception) -> dict:
    if isinstance(result, RecordAck | RecordQueued):
        return {
            "partition": result.partition,
            "offset": getattr(result, "offset", None),
            "error_code": None,
            "error": None,
        }
    # Per-record codes as Confluent reports them: unknown topic/partition as in the v2 API,
    # idempotent-producer rejections (409xx), 50003 retriable, 50002 any other failure.
    code = status_for(result)[1]
    if code not in PER_RECORD_CODES:
        code = 50003 if getattr(result, "retriable", False) else 50002
    count_error(code)
    return {"partition": None, "offset": None, "error_code": code, "error": str(result)}


def _status(results) -> int:
    """200 if any record was written (Confluent keeps 200 on partial failure), 202 if records
    were only queued (acks=0); when every record failed, the status of the first failure."""
    failures = [r for r in results if isinstance(r, Exception)]
    if len(failures) < len(results):
        return 202 if any(isinstance(r, RecordQueued) for r in results) else 200
    return status_for(failures[0])[0]
