"""Confluent REST Proxy v3 produce: `POST /v3/clusters/{c}/topics/{t}/records`.

The body is one JSON record or many concatenated ones. A body of one record (sent with a
Content-Length) gets one JSON response with its HTTP status. Otherwise (streaming mode, usually
`Transfer-Encoding: chunked`) the response is 200 at once and carries one delivery report per
record, in order, separated by CRLF; errors travel only in each report's `error_code`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

import orjson
from fastapi import APIRouter, Query, Request
from starlette.responses import Response, StreamingResponse

from api.core.broker import Broker
from api.core.records import RecordAck, RecordQueued
from api.http import access
from api.http.deps import BrokerDep
from api.http.errors import JSON_TYPE, ApiError, error_body, status_for
from api.http.json_stream import JsonValueSplitter
from api.http.routes.v3_topics import check_cluster
from api.http.wire import (
    ACKS_DESCRIPTION,
    ACKS_PATTERN,
    RecordLimits,
    V3Record,
    acks_mode,
    iso_ms,
    parse_v3_record,
)

router = APIRouter(prefix="/v3", tags=["v3 records"])

# Records produced concurrently from one stream; reports still go out in request order.
PIPELINE_DEPTH_MAX = 64

_BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "partition_id": {"type": "integer"},
                        "headers": {"type": "array", "items": {"type": "object"}},
                        "key": {"type": "object"},
                        "value": {"type": "object"},
                        "timestamp": {"type": "string", "format": "date-time"},
                        "producer_id": {
                            "type": "integer",
                            "description": "lakelog extension (idempotent produce): with "
                            "`producer_epoch` and `sequence`, the record is a batch of one; a "
                            "retry is acknowledged with the original offset, not appended again.",
                        },
                        "producer_epoch": {"type": "integer"},
                        "sequence": {"type": "integer"},
                    },
                }
            }
        },
    }
}


@router.post(
    "/clusters/{cluster_id}/topics/{topic}/records",
    summary="Produce records (one, or a stream of concatenated records)",
    openapi_extra=_BODY_DOC,
)
async def produce_records(
    cluster_id: str,
    topic: str,
    request: Request,
    broker: BrokerDep,
    acks: Annotated[str, Query(pattern=ACKS_PATTERN, description=ACKS_DESCRIPTION)] = "all",
) -> Response:
    check_cluster(cluster_id, broker.settings)
    await broker.topics.get(topic)
    splitter = JsonValueSplitter(broker.settings.stream_record_bytes_max)
    produce = _Producer(broker, cluster_id, topic, acks_mode(acks), request=request)
    if "content-length" in request.headers and "chunked" not in request.headers.get(
        "transfer-encoding", ""
    ):
        documents = await _read_whole(request, splitter, broker)
        if len(documents) == 1:
            report = await produce(documents[0])
            return Response(orjson.dumps(report), _report_status(report), media_type=JSON_TYPE)
        return _stream_reports(produce, _aiter(documents))
    return _stream_reports(produce, splitter.split(request.stream()))


async def _read_whole(request: Request, splitter: JsonValueSplitter, broker: Broker) -> list:
    body = await request.body()  # bounded: BodyLimitMiddleware checked the Content-Length
    documents = [document async for document in splitter.split(_aiter([body]))]
    if not documents:
        raise ApiError(422, 42206, "The request body is empty: send one or more JSON records.")
    return documents


async def _aiter(items) -> AsyncIterator:
    for item in items:
        yield item


def _stream_reports(produce, documents) -> StreamingResponse:
    async def reports():
        pending: asyncio.Queue = asyncio.Queue(PIPELINE_DEPTH_MAX)

        async def feed():
            # Records are prepared concurrently, but each is queued only once the one before
            # it is (a turn each): a partition keeps the stream's order.
            previous_queued = None
            async for document in documents:
                queued = asyncio.Event()
                task = produce(document, after=previous_queued, queued=queued.set)
                await pending.put(asyncio.ensure_future(task))
                previous_queued = queued
            await pending.put(None)

        feeder = asyncio.ensure_future(feed())
        try:
            while (task := await pending.get()) is not None:
                yield orjson.dumps(await task) + b"\r\n"
            await feeder
        finally:
            feeder.cancel()

    return DuplexStreamingResponse(reports(), media_type=JSON_TYPE)


class DuplexStreamingResponse(StreamingResponse):
    """Streams reports while the request body is still arriving.

    Starlette's StreamingResponse listens for a disconnect by calling `receive()` concurrently,
    which would steal the request's body chunks from the record parser; here the parser is
    the only reader, and a disconnect ends the body stream (and so this response) anyway.
    """

    async def __call__(self, scope, receive, send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for chunk in self.body_iterator:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class _Producer:
    """Produces one v3 record document and returns its delivery report."""

    def __init__(
        self, broker: Broker, cluster_id: str, topic: str, acks: str, *, request: Request
    ) -> None:
        self.broker, self.cluster_id, self.topic, self.acks = broker, cluster_id, topic, acks
        self.limits = RecordLimits.from_settings(broker.settings)
        self.request = request

    async def __call__(
        self, document, *, after: asyncio.Event | None = None, queued=lambda: None
    ) -> dict:
        """The delivery report of one record (an error report if it could not be produced);
        it is queued once `after` is set, and then calls `queued` (in every case)."""
        try:
            return await self._produce(document, after, queued)
        finally:
            if after is not None:
                await after.wait()  # a refused record must not let the next pass its elder
            queued()

    async def _produce(self, document, after: asyncio.Event | None, queued) -> dict:
        sections: dict[str, dict] = {}
        try:
            if isinstance(document, Exception):
                raise document
            document, sections = await self._serialized(document)
            record = parse_v3_record(document, self.limits)
            if record.idempotence is not None:  # a producer id is bound to its principal
                await access.check_producer(self.request, record.idempotence.producer_id)
                access.check_transactional(self.request, record.idempotence)
            if after is not None:
                await after.wait()
            (result,) = await self.broker.produce(
                self.topic,
                [record.produce],
                idempotence=record.idempotence,
                acks=self.acks,
                on_queued=queued,
            )
            if isinstance(result, Exception):
                raise result
        except Exception as error:
            return error_body(status_for(error, v3=True)[1], str(error))
        report = _report(self.cluster_id, self.topic, record, result)
        for field, section in sections.items():
            report[field] = {**report[field], **section}
        return report

    def _authorize_subject(self, subject: str) -> None:
        access.require_subject(self.request, "WRITE", subject)

    async def _serialized(self, document: object) -> tuple[object, dict[str, dict]]:
        """A record whose key or value has a schema type (AVRO, JSONSCHEMA, PROTOBUF), with
        them serialized as BINARY; what its report says of them."""
        if not isinstance(document, dict):
            return document, {}
        formats = self.request.app.state.schema_formats
        sections = {}
        for field in ("key", "value"):
            section, report = await formats.v3_section(
                self.topic, document.get(field), field, self._authorize_subject
            )
            if report:
                document = {**document, field: section}
                sections[field] = report
        return document, sections


def _report(cluster_id: str, topic: str, record: V3Record, ack: RecordAck | RecordQueued) -> dict:
    """A delivery report; acks=0 reports 202 with offset and timestamp null."""
    queued = isinstance(ack, RecordQueued)
    return {
        "error_code": 202 if queued else 200,
        "cluster_id": cluster_id,
        "topic_name": topic,
        "partition_id": ack.partition,
        "offset": None if queued else ack.offset,
        "timestamp": None if queued else iso_ms(ack.timestamp_ms),
        "key": _section(record.key_type, record.key_size),
        "value": _section(record.value_type, record.value_size),
    }


def _section(kind: str | None, size: int) -> dict | None:
    return None if kind is None else {"type": kind, "size": size}


def _report_status(report: dict) -> int:
    code = report["error_code"]
    return code if code < 1000 else code // 100
