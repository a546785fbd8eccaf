"""KIP-932's ShareFetch and ShareAcknowledge: a share consumer fetches from, and acknowledges
to, each partition's leader, within a share session (api/kafka/share_sessions.py).

A ShareFetch first applies the acknowledgements it carries, then acquires up to `max_records`
records of one of the session's partitions for the member (api/core/shares/serving.py: stored
before they are answered), long-polling up to `max_wait` for the first: the first partition
with records, starting one further at each fetch of the session, as Kafka's answers carry one
partition's records (librdkafka's tests count on it). `max_bytes` 0 fetches nothing. The
answer carries the partition's records as RecordBatch v2 and the offset ranges acquired, with
their delivery counts; acknowledgement errors come per partition (`acknowledge_error_code`). A
session closed with epoch -1 releases the member's records on its partitions.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from api.core.errors import InvalidRequest, NotLeader
from api.core.group_configs import DEFINITIONS
from api.core.shares import serving
from api.core.shares.serving import Delivery
from api.core.shares.share_partition import AcknowledgeType, Acquired
from api.kafka.connection import Connection
from api.kafka.errors import error_code, error_message
from api.kafka.fetch_batches import encode_records
from api.kafka.handlers.cluster import brokers
from api.kafka.handlers.consumer_groups import names_by_id
from api.kafka.messages import milliseconds
from api.kafka.share_sessions import (
    INITIAL_EPOCH,
    PartitionKey,
    ShareSession,
    ShareSessionError,
)

DEFAULT_RECORDS_MAX = 500  # a v0-style request without max_records: the client default
# The most records a share partition can have in flight (share.partition.max.record.locks).
ACKNOWLEDGED_MAX = int(DEFINITIONS["share.partition.max.record.locks"].high or 4_000)


@dataclass(frozen=True, slots=True)
class _Request:
    """What a ShareFetch or ShareAcknowledge names, by topic name."""

    # per partition: its acknowledgements, or why they are malformed (refused, all of them)
    acknowledgements: dict[PartitionKey, list[tuple[int, AcknowledgeType]] | InvalidRequest]
    fetched: list[PartitionKey]
    forgotten: list[PartitionKey]
    unknown: dict[uuid.UUID, list[int]]  # topic ids not known here


async def share_fetch(connection: Connection, request, version: int) -> dict:
    try:
        parsed = await _parsed(connection, request, request.forgotten_topics_data)
        plan = _plan(connection, request, parsed)
        acked = await _acknowledge_all(connection, request, parsed.acknowledgements)
        deliveries: dict[PartitionKey, Delivery | Exception] = {}
        if plan.closing:
            await _release(connection, request, plan.session.partitions)
        elif not getattr(request, "is_renew_ack", False) and request.max_bytes > 0:
            deliveries = await _acquire_one_of(connection, request, plan.session)
    except Exception as error:
        return _refused(error)
    settings = await connection.broker.group_configs.share_settings(request.group_id)
    answers = await _answers(connection, acked, deliveries)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "acquisition_lock_timeout": settings.limits.lock_duration_ms,
        "responses": answers + _unknown_topics(parsed.unknown),
        "node_endpoints": _endpoints(connection, answers),
    }


async def share_acknowledge(connection: Connection, request, version: int) -> dict:
    try:
        parsed = await _parsed(connection, request, ())
        if request.share_session_epoch == INITIAL_EPOCH:
            raise ShareSessionError(
                ErrorCode.invalid_share_session_epoch,
                "ShareAcknowledge cannot open a share session: ShareFetch with epoch 0 does.",
            )
        plan = _plan(connection, request, parsed, adds_partitions=False)
        acked = await _acknowledge_all(connection, request, parsed.acknowledgements)
        if plan.closing:
            await _release(connection, request, plan.session.partitions)
    except Exception as error:
        return _refused(error)
    settings = await connection.broker.group_configs.share_settings(request.group_id)
    answers = [
        _partition_answer(key, error, fetch=False) | {"topic": key[0]}
        for key, error in acked.items()
    ]
    responses = await _by_topic_id(connection, answers)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "acquisition_lock_timeout": settings.limits.lock_duration_ms,
        "responses": responses + _unknown_topics(parsed.unknown),
        "node_endpoints": _endpoints(connection, responses),
    }


# ---- the request ------------------------------------------------------------------------------


async def _parsed(connection: Connection, request, forgotten_topics) -> _Request:
    names = await names_by_id(connection)
    # RENEW (KIP-1222) only from v2, in a request that says it renews
    renews = bool(getattr(request, "is_renew_ack", False))
    acknowledgements: dict = {}
    fetched, unknown = [], {}
    for topic in request.topics:
        if topic.topic_id not in names:
            unknown[topic.topic_id] = [p.partition_index for p in topic.partitions]
            continue
        for partition in topic.partitions:
            key = (names[topic.topic_id], partition.partition_index)
            fetched.append(key)
            batches = partition.acknowledgement_batches
            if batches:  # a partition named twice: its batches together
                earlier = acknowledgements.get(key, [])
                try:
                    found = _acknowledgements(batches, renews=renews)
                    acknowledgements[key] = (
                        earlier if isinstance(earlier, InvalidRequest) else earlier + found
                    )
                except InvalidRequest as malformed:
                    acknowledgements[key] = malformed
    forgotten = [
        (names[t.topic_id], p)
        for t in forgotten_topics
        if t.topic_id in names
        for p in t.partitions
    ]
    return _Request(acknowledgements, fetched, forgotten, unknown)


def _acknowledgements(batches, *, renews: bool) -> list[tuple[int, AcknowledgeType]]:
    """Offsets and types: one type for a whole batch, or one per offset. A partition never has
    more records in flight than `share.partition.max.record.locks` allows (at most
    ACKNOWLEDGED_MAX), so more offsets than that are malformed, not work to do."""
    acknowledgements: list[tuple[int, AcknowledgeType]] = []
    for batch in batches:
        span = batch.last_offset - batch.first_offset + 1
        if batch.first_offset < 0 or len(acknowledgements) + span > ACKNOWLEDGED_MAX:
            raise InvalidRequest(
                f"Acknowledgement batch {batch.first_offset}-{batch.last_offset}: offsets start "
                f"at 0, and a partition's batches name at most {ACKNOWLEDGED_MAX} offsets."
            )
        offsets = range(batch.first_offset, batch.last_offset + 1)
        types = list(batch.acknowledge_types)
        if len(types) == 1:
            types = types * len(offsets)
        kinds = range(5) if renews else range(4)
        if not offsets or len(types) != len(offsets) or any(t not in kinds for t in types):
            raise InvalidRequest(
                f"Acknowledgement batch {batch.first_offset}-{batch.last_offset} has "
                f"{len(batch.acknowledge_types)} types: one, or one per offset (0 to 3; 4, "
                "RENEW, in a v2 request with is_renew_ack)."
            )
        acknowledgements += [(o, AcknowledgeType(t)) for o, t in zip(offsets, types, strict=True)]
    return acknowledgements


def _plan(connection: Connection, request, parsed: _Request, *, adds_partitions: bool = True):
    """The share session after the request: a ShareFetch names the partitions it fetches
    from (and those to forget); a ShareAcknowledge only moves the epoch on, as Kafka's."""
    if not request.group_id or not request.member_id:
        raise InvalidRequest("A share request names its group and member.")
    connection.check("READ", "group", request.group_id)
    if request.share_session_epoch == INITIAL_EPOCH and parsed.acknowledgements:
        raise InvalidRequest("A request opening a share session cannot acknowledge records.")
    return connection.share_sessions.plan(
        (request.group_id, request.member_id),
        request.share_session_epoch,
        parsed.fetched if adds_partitions else (),
        parsed.forgotten,
    )


def _refused(error: Exception) -> dict:
    code = error.code if isinstance(error, ShareSessionError) else error_code(error)
    message = str(error) if isinstance(error, ShareSessionError) else error_message(error)
    return {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message,
        "acquisition_lock_timeout": 0,
        "responses": [],
        "node_endpoints": [],
    }


# ---- acknowledging, acquiring, releasing ----------------------------------------------------


async def _acknowledge_all(
    connection: Connection, request, acknowledgements: dict
) -> dict[PartitionKey, Exception | None]:
    """Each partition's acknowledgements, all or none: None, or the error refusing them."""
    results: dict[PartitionKey, Exception | None] = {}
    for (topic, partition), items in acknowledgements.items():
        try:
            if isinstance(items, InvalidRequest):
                raise items
            connection.check("READ", "topic", topic)
            key = await serving.share_key(connection.broker, request.group_id, topic, partition)
            await serving.acknowledge_here(connection.broker, key, request.member_id, items)
            results[(topic, partition)] = None
        except Exception as error:
            results[(topic, partition)] = error
    return results


async def _acquire_one_of(
    connection: Connection, request, session: ShareSession
) -> dict[PartitionKey, Delivery | Exception]:
    """The first of the session's partitions (from a rotating start) with records to acquire,
    or an error; long-polls until there is one."""
    records_max = getattr(request, "max_records", 0) or DEFAULT_RECORDS_MAX
    max_wait_ms = min(milliseconds(request.max_wait), connection.settings.fetch_timeout_ms_max)
    partitions = list(session.partitions)
    if partitions:
        start = session.fetches % len(partitions)
        partitions = partitions[start:] + partitions[:start]
    session.fetches += 1

    async def read() -> dict[PartitionKey, Delivery | Exception]:
        found: dict[PartitionKey, Delivery | Exception] = {}
        for key in partitions:
            found[key] = await _acquire_one(
                connection, request, key, records_max, request.max_bytes
            )
            if isinstance(found[key], Exception) or found[key].acquired:
                break
        return found

    def enough(found: dict) -> bool:
        return any(isinstance(f, Exception) or f.acquired for f in found.values())

    if not partitions:
        return {}
    return await connection.broker.long_poll(list(partitions), read, enough, max_wait_ms)


async def _acquire_one(
    connection: Connection, request, partition: PartitionKey, records_max: int, bytes_max: int
) -> Delivery | Exception:
    topic, index = partition
    try:
        connection.check("READ", "topic", topic)
        key = await serving.share_key(connection.broker, request.group_id, topic, index)
        return await serving.acquire_here(
            connection.broker,
            key,
            request.member_id,
            records_max=records_max,
            bytes_max=bytes_max,
        )
    except Exception as error:
        return error


async def _release(connection: Connection, request, partitions) -> None:
    """A closed session's member gives back what it holds on the session's partitions."""
    for topic, index in partitions:
        try:
            key = await serving.share_key(connection.broker, request.group_id, topic, index)
            await serving.release_here(connection.broker, key, request.member_id)
        except Exception:  # the partition moved or went: its locks expire there
            continue


# ---- the answer ---------------------------------------------------------------------------------


async def _answers(connection: Connection, acked: dict, deliveries: dict) -> list[dict]:
    answers = []
    for key in dict.fromkeys([*acked, *deliveries]):
        delivery = deliveries.get(key)
        if isinstance(delivery, Delivery) and not delivery.acquired and key not in acked:
            continue  # nothing to say about this partition
        answer = _partition_answer(key, acked.get(key), fetch=True)
        if isinstance(delivery, Exception):
            answer |= _error_fields(delivery, "") | {"current_leader": _leader(delivery)}
        elif delivery is not None and delivery.acquired:
            topic = await connection.broker.topics.get(key[0])
            answer["records"] = encode_records(delivery.records, topic.config.compression_type)
            answer["acquired_records"] = _ranges(delivery.acquired)
        answers.append(answer | {"topic": key[0]})
    return await _by_topic_id(connection, answers)


def _partition_answer(key: PartitionKey, ack_error: Exception | None, *, fetch: bool) -> dict:
    answer = {"partition_index": key[1], "current_leader": _leader(ack_error)}
    if not fetch:
        return answer | _error_fields(ack_error, "")
    acknowledged = _error_fields(ack_error, "acknowledge_")
    return (
        answer | _error_fields(None, "") | acknowledged | {"records": b"", "acquired_records": []}
    )


def _error_fields(error: Exception | None, prefix: str) -> dict:
    code = ErrorCode.none if error is None else error_code(error)
    message = None if error is None else error_message(error)
    return {f"{prefix}error_code": code, f"{prefix}error_message": message}


def _leader(error: Exception | None) -> dict:
    leader_id = error.leader_id if isinstance(error, NotLeader) else None
    return {"leader_id": -1 if leader_id is None else leader_id, "leader_epoch": -1}


def _ranges(acquired: Sequence[Acquired]) -> list[dict]:
    """Consecutive offsets of one delivery count as one range, in offset order."""
    ranges: list[dict] = []
    for record in sorted(acquired, key=lambda a: a.offset):
        last = ranges[-1] if ranges else None
        if (
            last is not None
            and last["last_offset"] == record.offset - 1
            and last["delivery_count"] == record.delivery_count
        ):
            last["last_offset"] = record.offset
        else:
            ranges.append(
                {
                    "first_offset": record.offset,
                    "last_offset": record.offset,
                    "delivery_count": record.delivery_count,
                }
            )
    return ranges


async def _by_topic_id(connection: Connection, answers: list[dict]) -> list[dict]:
    ids = {name: topic_id for topic_id, name in (await names_by_id(connection)).items()}
    grouped: dict[str, list[dict]] = {}
    for answer in answers:
        topic = answer.pop("topic")
        grouped.setdefault(topic, []).append(answer)
    return [
        {"topic_id": ids[topic], "partitions": partitions}
        for topic, partitions in grouped.items()
        if topic in ids
    ]


def _unknown_topics(unknown: dict[uuid.UUID, list[int]]) -> list[dict]:
    error = {"error_code": ErrorCode.unknown_topic_id, "error_message": "Unknown topic id."}
    return [
        {
            "topic_id": topic_id,
            "partitions": [
                {
                    "partition_index": p,
                    "current_leader": {"leader_id": -1, "leader_epoch": -1},
                    **error,
                    "acknowledge_error_code": ErrorCode.none,
                    "records": b"",
                    "acquired_records": [],
                }
                for p in partitions
            ],
        }
        for topic_id, partitions in unknown.items()
    ]


def _endpoints(connection: Connection, responses: list[dict]) -> list[dict]:
    """The live brokers, when a partition answers that another node leads it."""
    moved = any(
        p.get("error_code") == ErrorCode.not_leader_or_follower
        for r in responses
        for p in r["partitions"]
    )
    return brokers(connection) if moved else []
