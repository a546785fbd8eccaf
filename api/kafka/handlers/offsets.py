"""ListOffsets: the earliest (-2) or latest (-1) offset of a partition, the first offset at or
after a timestamp with that record's timestamp, and (v7+) the record with the largest timestamp
(-3). Answered by the partition's leader. There is no tiered storage, so (v8+) the earliest
local offset (-4) is the log start and (v9+) the latest tiered one (-5) is -1, as Kafka answers
for a topic without remote storage."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from api.core.errors import check_leader_epoch
from api.kafka.connection import Connection
from api.kafka.errors import error_code

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
READ_COMMITTED = 1  # ListOffsets' isolation_level


async def list_offsets(connection: Connection, request, version: int) -> dict:
    # read_committed (v2+): "latest" is the last stable offset, so a consumer starting there
    # does not skip the records of a transaction still open below the high watermark.
    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    topics = []
    for topic in request.topics:
        # At once: the first request for a partition may make this node its leader (a table
        # open and a commit each), which one at a time took seconds for a new topic.
        partitions = await asyncio.gather(
            *(_with_epoch(connection, topic.name, p, committed) for p in topic.partitions)
        )
        topics.append({"name": topic.name, "partitions": list(partitions)})
    return {"throttle_time": 0, "topics": topics}


async def _with_epoch(connection: Connection, topic: str, partition, committed: bool) -> dict:
    """One partition's answer with the leader epoch of its offset (v4+), after checking the
    requester's current_leader_epoch."""
    index = partition.partition_index
    try:
        current, epochs = await connection.broker.partitions.leader_epochs(topic, index)
        check_leader_epoch(getattr(partition, "current_leader_epoch", -1), current)
    except Exception as error:
        code = error_code(error)
        return {"partition_index": index, "error_code": code, "timestamp": -1, "offset": -1}
    answer = await _one(connection, topic, index, partition.timestamp, committed)
    offset = answer.get("offset", -1)
    if answer["error_code"] != ErrorCode.none or offset < 0:
        return answer | {"leader_epoch": -1}
    epoch = epochs.epoch_of(offset)  # the latest offset: the epoch that writes it next
    return answer | {"leader_epoch": epoch}


async def _one(
    connection: Connection, topic: str, partition: int, timestamp: int, committed: bool
) -> dict:
    broker = connection.broker
    answer = {"partition_index": partition, "error_code": ErrorCode.none}
    try:
        connection.check("DESCRIBE", "topic", topic)
        if timestamp in (EARLIEST, EARLIEST_LOCAL):
            bounds = await broker.partitions.bounds(topic, partition)
            return answer | {"timestamp": -1, "offset": bounds.log_start_offset}
        if timestamp == LATEST_TIERED:
            await broker.partitions.bounds(topic, partition)  # the partition exists
            return answer | {"timestamp": -1, "offset": -1}
        if timestamp == LATEST:
            bounds = await broker.partitions.bounds(topic, partition, stable=committed)
            offset = bounds.last_stable_offset if committed else bounds.high_watermark
            return answer | {"timestamp": -1, "offset": offset}
        if timestamp < 0 and timestamp != MAX_TIMESTAMP:
            return answer | {"error_code": ErrorCode.invalid_request}
        found = await _record_by_time(broker, topic, partition, timestamp)
        if found is not None and committed:  # as Kafka: none at or past the LSO
            bounds = await broker.partitions.bounds(topic, partition, stable=True)
            found = found if found[0] < bounds.last_stable_offset else None
        offset, timestamp_ms = found if found is not None else (-1, -1)
        return answer | {"timestamp": timestamp_ms, "offset": offset}
    except Exception as error:
        return answer | {"error_code": error_code(error), "timestamp": -1, "offset": -1}


async def _record_by_time(broker, topic: str, partition: int, timestamp: int):
    """(offset, timestamp ms) of the record MAX_TIMESTAMP or a timestamp finds, or None."""
    if timestamp == MAX_TIMESTAMP:
        return await broker.partitions.offset_of_max_timestamp(topic, partition)
    offset = await broker.partitions.offset_for_timestamp(topic, partition, timestamp)
    if offset is None:
        return None
    record = await broker.record_at(topic, partition, offset)
    return offset, _timestamp_ms(record.records)


def _timestamp_ms(records) -> int:
    if not records.num_rows:
        return -1
    return records.column("timestamp")[0].value // 1000


async def offset_for_leader_epoch(connection: Connection, request, version: int) -> dict:
    """OffsetForLeaderEpoch (KIP-320): where a leader epoch ends, so a consumer can tell after
    a leader change whether the log it read from was truncated (here it never is: lakelog
    does not lose acknowledged records, and the answer shows it)."""
    topics = []
    for topic in request.topics:
        partitions = [await _epoch_end(connection, topic.topic, p) for p in topic.partitions]
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}


async def _epoch_end(connection: Connection, topic: str, partition) -> dict:
    answer = {"partition": partition.partition, "error_code": ErrorCode.none}
    try:
        connection.check("DESCRIBE", "topic", topic)
        epoch, end_offset = await connection.broker.partitions.epoch_end_offset(
            topic,
            partition.partition,
            current_leader_epoch=partition.current_leader_epoch,
            leader_epoch=partition.leader_epoch,
        )
    except Exception as error:
        return answer | {"error_code": error_code(error), "leader_epoch": -1, "end_offset": -1}
    return answer | {"leader_epoch": epoch, "end_offset": end_offset}
