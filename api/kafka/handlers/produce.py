"""Produce: each partition's RecordBatch becomes one append to the partition's single writer,
with the batch's producer id, epoch and base sequence as an idempotent producer batch (a retry
gets its original offsets; a gap is OUT_OF_ORDER_SEQUENCE_NUMBER). Only the leader appends: a
node that does not lead the partition answers NOT_LEADER_OR_FOLLOWER, and the client refreshes
its metadata, as with Kafka. acks=0 gets no response at all; acks=1 and acks=-1 both wait for
the durable commit (the store replicates, so there is no weaker acknowledgement to give).

From v12 (transactions v2, KIP-890) a transactional batch adds its partition to the
transaction itself: the request's transactional id goes to its coordinator (here or on another
node) before the batch is queued, which also starts the transaction, and refuses a batch of an
ended or fenced epoch, so no batch can open a transaction nobody ends."""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from api.core.errors import InvalidRequest
from api.core.records import OpenedBatch
from api.kafka.codec import decode_batches
from api.kafka.connection import Connection, Turn
from api.kafka.errors import error_code, error_message
from storage_layout.producer_state import ProducerBatch
from storage_layout.records import TopicPartition

ACKS_NONE = 0
TRANSACTIONS_V2_PRODUCE = 12  # the first Produce version that adds partitions implicitly


async def produce(connection: Connection, request, version: int) -> dict | None:
    """Queue every partition's batch after the connection's earlier batch for that partition,
    admit the connection's next request, then wait for the commits (the next request's
    batches may join the same commit)."""
    # This request's own (the next request sets the connection's once this one reserves).
    reserve, admit = connection.reserve, connection.admit
    implicit_txn = request.transactional_id if version >= TRANSACTIONS_V2_PRODUCE else None
    slots = [(t.name, p) for t in request.topic_data for p in t.partition_data]
    turns = [connection.turns.take((name, partition.index)) for name, partition in slots]
    reserve()  # each batch holds its place: the next produce may start
    queues = [
        _queue_in_turn(connection, name, partition, implicit_txn, turn)
        for (name, partition), turn in zip(slots, turns, strict=True)
    ]
    if implicit_txn is None:
        outcomes = await asyncio.gather(*queues)
    else:  # each batch adds its partition to the transaction: one at a time, in order
        outcomes = [await queue for queue in queues]
    queued = [(name, p.index, o) for (name, p), o in zip(slots, outcomes, strict=True)]
    admit()
    if request.acks == ACKS_NONE:
        for _, _, outcome in queued:
            if isinstance(outcome, _Queued):
                outcome.pending.add_done_callback(_consume_outcome)
        return None
    by_topic: dict[str, list[dict]] = {}
    for name, index, outcome in queued:
        answer = await _outcome(outcome)
        by_topic.setdefault(name, []).append({"index": index, **answer})
    responses = [
        {"name": name, "partition_responses": partitions} for name, partitions in by_topic.items()
    ]
    return {"responses": responses, "throttle_time": 0}


@dataclass(frozen=True, slots=True)
class _Queued:
    pending: asyncio.Future  # resolves to the BatchAck once committed
    log_append_time: bool


async def _queue_in_turn(
    connection: Connection, topic_name: str, partition, implicit_txn: str | None, turn: Turn
) -> _Queued | Exception:
    try:
        if turn.previous is not None:
            await turn.previous
        return await _queue(connection, topic_name, partition, implicit_txn)
    finally:
        connection.turns.done(turn)


async def _queue(
    connection: Connection, topic_name: str, partition, implicit_txn: str | None
) -> _Queued | Exception:
    """The batch queued at the partition's writer, or why it was refused (nothing queued).
    `implicit_txn`: the transactional id a v12+ request names (None before v12)."""
    data = partition.records or b""

    async def open_batch() -> OpenedBatch:
        batch = _one_batch(data)
        producer = None
        if batch.idempotent:
            await connection.security.check_producer(batch.producer_id, connection.principal)
            producer = ProducerBatch(
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                len(batch.records),
                transactional=batch.is_transactional,
            )
        if batch.is_transactional and implicit_txn is not None:
            where = TopicPartition(topic_name, partition.index)
            await _add_to_transaction(connection, implicit_txn, batch, where)
        return OpenedBatch(batch.records, producer)

    try:
        connection.check("WRITE", "topic", topic_name)
        topic, pending = await connection.broker.produce_batch(
            topic_name, partition.index, size_bytes=len(data), open_batch=open_batch
        )
    except Exception as error:
        return error
    return _Queued(pending, topic.config.log_append_time)


async def _outcome(outcome: _Queued | Exception) -> dict:
    try:
        if isinstance(outcome, Exception):
            raise outcome
        ack = await outcome.pending
    except Exception as error:
        answer = {
            "error_code": error_code(error),
            "base_offset": -1,
            "error_message": error_message(error),
        }
        index = getattr(error, "index", None)
        indexes = getattr(error, "indexes", None) or ((index,) if isinstance(index, int) else ())
        if getattr(error, "code", None) == "INVALID_RECORD" and indexes:
            # which records were refused, and why (ProduceResponse v8+): each, as Kafka lists them
            message = error_message(error)
            answer["record_errors"] = [
                {"batch_index": index, "batch_index_error_message": message} for index in indexes
            ]
        return answer
    append_time = None
    if outcome.log_append_time:
        append_time = datetime.datetime.fromtimestamp(ack.append_time_ms / 1000, datetime.UTC)
    return {
        "error_code": ErrorCode.none,
        "base_offset": ack.base_offset,
        "log_append_time": append_time,
    }


async def _add_to_transaction(connection: Connection, transactional_id: str, batch, where):
    connection.check("WRITE", "transactional_id", transactional_id)
    await connection.broker.transaction_requests.add_partitions(
        transactional_id, batch.producer_id, batch.producer_epoch, [where]
    )


def _one_batch(data: bytes):
    """Kafka (v3+) takes exactly one batch per partition in a Produce request."""
    batches = decode_batches(data)
    if len(batches) != 1:
        raise InvalidRequest(f"{len(batches)} record batches for one partition: send exactly one.")
    batch = batches[0]
    if batch.is_control:
        raise InvalidRequest("Control batches are written by the broker, never produced.")
    if batch.is_transactional and not batch.idempotent:
        raise InvalidRequest("A transactional batch needs a producer id (InitProducerId).")
    if not batch.records:
        raise InvalidRequest("An empty record batch appends nothing.")
    return batch


def _consume_outcome(future: asyncio.Future) -> None:
    """acks=0: nobody waits for the outcome; retrieve it so asyncio does not log it."""
    if not future.cancelled():
        future.exception()
