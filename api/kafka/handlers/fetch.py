"""Fetch: records from each requested partition, encoded as RecordBatch v2, long-polling until
`min_bytes` have arrived or `max_wait` has passed (woken by the commits of the partitions this
node leads). A node that does not lead a partition serves its committed records from the shared
table (KIP-392's follower fetching) and answers NOT_LEADER_OR_FOLLOWER only at the head.

Sessions (KIP-227, api/kafka/fetch_sessions.py): a client that opens one sends its
partitions once, then only changes; an incremental answer carries only the partitions with
records, errors or new bounds.
Transactions (FORMAT.md §14): every fetch frames a transaction's records as transactional
batches of their producer and each marker as a control batch, so clients skip markers; with
`isolation_level=read_committed` records stop at the last stable offset and the answer lists
the aborted transactions of the range read, which the client skips.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from api.core.errors import check_leader_epoch
from api.core.records import FetchRequest
from api.kafka.connection import Connection
from api.kafka.errors import error_code
from api.kafka.fetch_batches import encode_records
from api.kafka.fetch_sessions import FetchSessionError
from api.kafka.messages import milliseconds
from storage_layout.errors import OffsetOutOfRange
from storage_layout.leader_epochs import LeaderEpochs
from storage_layout.log.leadership import current_epoch
from storage_layout.records import FetchResult, Isolation

READ_COMMITTED = 1  # Fetch's isolation_level


@dataclass(frozen=True, slots=True)
class _Wanted:
    topic: str
    partition: int
    offset: int
    bytes_max: int
    leader_epoch: int = -1  # the client's current_leader_epoch (-1: not checked)
    isolation: Isolation = Isolation.UNCOMMITTED


async def fetch(connection: Connection, request, version: int) -> dict:
    try:
        plan = connection.fetch_sessions.plan(request)
    except FetchSessionError as error:
        return {"throttle_time": 0, "error_code": error.code, "session_id": 0, "responses": []}
    isolation = _isolation(request)
    wanted = [_Wanted(*item, isolation) for item in plan.wanted]
    max_wait_ms = min(milliseconds(request.max_wait), connection.settings.fetch_timeout_ms_max)
    keys = [(w.topic, w.partition) for w in wanted]
    bytes_min = max(1, request.min_bytes)

    async def read() -> tuple[list[dict], int]:
        return await _read_all(connection, wanted, request.max_bytes)

    def enough(read_all: tuple[list[dict], int]) -> bool:
        answers, size = read_all
        return size >= bytes_min or _has_errors(answers)

    answers, _ = await connection.broker.long_poll(keys, read, enough, max_wait_ms)
    session = plan.session
    if session is not None:
        by_key = dict(zip(keys, answers, strict=True))
        if plan.incremental:  # only what changed: records, errors, new bounds
            by_key = {k: a for k, a in by_key.items() if session.worth_answering(k, a)}
        connection.fetch_sessions.advance(session, by_key)
        wanted = [w for w in wanted if (w.topic, w.partition) in by_key]
        answers = [by_key[(w.topic, w.partition)] for w in wanted]
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": 0 if session is None else session.session_id,
        "responses": _by_topic(wanted, answers),
    }


async def _read_all(connection: Connection, wanted: list[_Wanted], total_max: int):
    answers, size = [], 0
    for item in wanted:
        # Kafka returns the first batch whole even past the limits, so a large record never
        # stalls a consumer; after that the total budget applies.
        budget = max(1, min(item.bytes_max, total_max - size)) if size else item.bytes_max
        if size and size >= total_max:
            answers.append(await _bounds_only(connection, item))
            continue
        answer = await _read_one(connection, item, budget)
        size += len(answer.get("records") or b"")
        answers.append(answer)
    return answers, size


async def _read_one(connection: Connection, item: _Wanted, bytes_max: int) -> dict:
    request = FetchRequest(item.topic, item.partition, item.offset, bytes_max, 0, item.isolation)
    try:
        connection.check("READ", "topic", item.topic)
        result = await connection.broker.read_now(request)
        check_leader_epoch(item.leader_epoch, current_epoch(result.transactions))
        compression_type = (await connection.broker.topics.get(item.topic)).config.compression_type
    except OffsetOutOfRange as error:
        return _error(item, error, error.high_watermark, error.log_start_offset)
    except Exception as error:
        return _error(item, error, -1, -1)
    return {
        "partition_index": item.partition,
        "error_code": ErrorCode.none,
        "high_watermark": result.high_watermark,
        "last_stable_offset": _stable(result),
        "log_start_offset": result.log_start_offset,
        "aborted_transactions": _aborted(result),
        "records": encode_records(
            result.records, compression_type, LeaderEpochs.from_transactions(result.transactions)
        ),
    }


def _isolation(request) -> Isolation:
    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    return Isolation.COMMITTED if committed else Isolation.UNCOMMITTED


def _stable(result: FetchResult) -> int:
    stable = result.last_stable_offset
    return result.high_watermark if stable is None else stable


def _aborted(result: FetchResult) -> list[dict]:
    return [
        {"producer_id": entry.producer_id, "first_offset": entry.first_offset}
        for entry in result.aborted
    ]


async def _bounds_only(connection: Connection, item: _Wanted) -> dict:
    """A partition past the response's byte budget: no records, so the client asks again."""
    try:
        bounds = await connection.broker.partitions.bounds(item.topic, item.partition)
        high_watermark, log_start = bounds.high_watermark, bounds.log_start_offset
    except Exception:  # led elsewhere: the next fetch reads it
        high_watermark = log_start = -1
    return {
        "partition_index": item.partition,
        "error_code": ErrorCode.none,
        "high_watermark": high_watermark,
        "last_stable_offset": high_watermark,
        "log_start_offset": log_start,
        "aborted_transactions": [],
        "records": b"",
    }


def _error(item: _Wanted, error: Exception, high_watermark: int, log_start: int) -> dict:
    return {
        "partition_index": item.partition,
        "error_code": error_code(error),
        "high_watermark": high_watermark,
        "last_stable_offset": high_watermark,
        "log_start_offset": log_start,
        "aborted_transactions": None,
        "records": b"",  # empty, never null: librdkafka refuses a null record set
    }


def _has_errors(answers: list[dict]) -> bool:
    return any(answer["error_code"] != ErrorCode.none for answer in answers)


def _by_topic(wanted: list[_Wanted], answers: list[dict]) -> list[dict]:
    by_topic: dict[str, list[dict]] = {}
    for item, answer in zip(wanted, answers, strict=True):
        by_topic.setdefault(item.topic, []).append(answer)
    return [{"topic": topic, "partitions": partitions} for topic, partitions in by_topic.items()]
