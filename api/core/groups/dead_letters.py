"""Dead letter topics: a consumer that cannot process a record hands it back in one call.

lakelog copies the record (key, value, headers, as the table holds it) to the dead letter topic
(`<topic>.dlq` unless the caller names another; created on first use with the source's
partition count), adds headers that say where it came from and why, and then commits the
group's offset past it, fenced by the member's generation like any commit. Protocol-neutral:
the native group API and the REST consumer instances both call `send_dead_letter`.

Guarantee: at least once. The dead letter is committed before the source offset; a crash or a
lost answer between the two leaves the offset uncommitted, so the record is processed (and
perhaps dead-lettered) again. A dead letter's `lakelog.dlq.source.*` headers identify it, so a
reader of the dead letter topic can drop such repeats.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from api.core.broker import Broker
from api.core.groups.errors import InvalidGroupRequest, RecordNotFound
from api.core.records import ACKS_ALL, ProduceRecord, RecordAck
from storage_layout.errors import TopicExists, TopicNotFound
from storage_layout.meta.consumer_offsets import OffsetCommit
from storage_layout.records import Header, NewRecord, TopicPartition

DLQ_SUFFIX = ".dlq"
HEADER_PREFIX = "lakelog.dlq."
SOURCE_TOPIC_HEADER = HEADER_PREFIX + "source.topic"
SOURCE_PARTITION_HEADER = HEADER_PREFIX + "source.partition"
SOURCE_OFFSET_HEADER = HEADER_PREFIX + "source.offset"
SOURCE_TIMESTAMP_HEADER = HEADER_PREFIX + "source.timestamp"  # ms since the epoch
GROUP_HEADER = HEADER_PREFIX + "group"
ERROR_HEADER = HEADER_PREFIX + "error"
ATTEMPTS_HEADER = HEADER_PREFIX + "attempts"
ERROR_BYTES_MAX = 16 * 1024


@dataclass(frozen=True, slots=True)
class DeadLetterReport:
    """A consumer's report that it gave up on the record at `offset` of `source`."""

    source: TopicPartition
    offset: int
    error: str
    attempts: int = 1
    dead_letter_topic: str | None = None  # None: `<source topic>.dlq`

    @property
    def target_topic(self) -> str:
        return self.dead_letter_topic or self.source.topic + DLQ_SUFFIX


@dataclass(frozen=True, slots=True)
class DeadLetterRequest:
    """A report and the group member making it (whose offset commit it includes)."""

    group_id: str
    member_id: str | None  # None, with generation -1: a consumer outside any generation
    generation: int
    report: DeadLetterReport


@dataclass(frozen=True, slots=True)
class DeadLetterAck:
    """Where the dead letter landed and the group's committed offset for the source after."""

    dead_letter_topic: str
    partition: int
    offset: int
    committed_offset: int


async def send_dead_letter(broker: Broker, request: DeadLetterRequest) -> DeadLetterAck:
    """Copy the record to the dead letter topic, then commit the source offset past it.

    The member is checked before anything is written, so a member that missed a rebalance is
    refused (ILLEGAL_GENERATION, ...) without leaving a dead letter behind.

    Raises:
        OffsetOutOfRange: the offset is not in the source partition.
        RecordNotFound: compaction removed the record.
        InvalidGroupRequest: an empty error, attempts below 1, an oversized error text, or a
            dead letter topic equal to the source.
    """
    report = request.report
    _check(report)
    groups = broker.groups
    await groups.check_committer(request.group_id, request.member_id, request.generation)
    ack = await write_dead_letter(broker, report, group_id=request.group_id)
    committed = await _commit_past(broker, request)
    return DeadLetterAck(report.target_topic, ack.partition, ack.offset, committed)


async def write_dead_letter(
    broker: Broker, report: DeadLetterReport, *, group_id: str, copy_record: bool = True
) -> RecordAck:
    """Copy the reported record to its dead letter topic (created on first use) with the
    headers that name its source and the failure; with `copy_record` False, only the headers
    (a share group's `errors.deadletterqueue.copy.record.enable`).

    Raises:
        OffsetOutOfRange: the offset is not in the source partition.
        RecordNotFound: compaction removed the record.
        InvalidGroupRequest: the dead letter topic is the source topic.
    """
    if report.target_topic == report.source.topic:  # it would be delivered again
        raise InvalidGroupRequest("The dead letter topic must differ from the source topic.")
    record = await _source_record(broker, report)
    if not copy_record:
        record = record | {"key": None, "value": None}
    return await _produce(broker, report, group_id, record)


def _check(report: DeadLetterReport) -> None:
    if not report.error.strip():
        raise InvalidGroupRequest("Say why the record failed: 'error' must not be empty.")
    if len(report.error.encode()) > ERROR_BYTES_MAX:
        raise InvalidGroupRequest(f"'error' is over {ERROR_BYTES_MAX} bytes: shorten it.")
    if report.attempts < 1:
        raise InvalidGroupRequest(f"'attempts' is {report.attempts}: it counts from 1.")
    if report.offset < 0:
        raise InvalidGroupRequest(f"Offset {report.offset} is negative; offsets start at 0.")


async def _source_record(broker: Broker, report: DeadLetterReport) -> dict:
    source = report.source
    result = await broker.record_at(source.topic, source.partition, report.offset)
    if not result.records.num_rows:
        raise RecordNotFound(
            f"{source.topic}/{source.partition} no longer holds offset {report.offset}: "
            f"key compaction removed it (a newer record with its key exists)."
        )
    return _first_row(result.records)


def _first_row(records: pa.Table) -> dict:
    row = records.slice(0, 1).to_pylist()[0]
    row["timestamp_ms"] = int(row["timestamp"].timestamp() * 1000)
    return row


async def _produce(broker: Broker, report: DeadLetterReport, group_id: str, row: dict) -> RecordAck:
    topic = await _dead_letter_topic(broker, report)
    # The source's partition number, as Spring's dead letter publisher: keyed records land
    # where the key's partition is anyway, and unkeyed ones keep their partition's order.
    partition = report.source.partition if report.source.partition < topic.partitions else None
    record = NewRecord(
        key=row["key"], value=row["value"], headers=_headers(report, group_id, row)
    )  # timestamp: now, when it failed (the source's is in a header)
    [result] = await broker.produce(topic.name, [ProduceRecord(partition, record)], acks=ACKS_ALL)
    if isinstance(result, Exception):
        raise result
    return result


async def _dead_letter_topic(broker: Broker, report: DeadLetterReport):
    name = report.target_topic
    try:
        return await broker.topics.get(name)
    except TopicNotFound:
        source = await broker.topics.get(report.source.topic)
    try:
        return await broker.topics.create(name, partitions=source.partitions, configs={})
    except TopicExists:  # another consumer created it a moment ago
        return await broker.topics.get(name)


def _headers(report: DeadLetterReport, group_id: str, row: dict) -> tuple[Header, ...]:
    """The record's own headers (earlier dead-letter headers dropped: it failed again) and
    ours, which name its source and the failure."""
    own = tuple(
        (h["key"], h["value"])
        for h in row["headers"] or ()
        if not h["key"].startswith(HEADER_PREFIX)
    )
    ours = {
        SOURCE_TOPIC_HEADER: report.source.topic,
        SOURCE_PARTITION_HEADER: str(report.source.partition),
        SOURCE_OFFSET_HEADER: str(report.offset),
        SOURCE_TIMESTAMP_HEADER: str(row["timestamp_ms"]),
        GROUP_HEADER: group_id,
        ERROR_HEADER: report.error,
        ATTEMPTS_HEADER: str(report.attempts),
    }
    return own + tuple((name, value.encode()) for name, value in ours.items())


async def _commit_past(broker: Broker, request: DeadLetterRequest) -> int:
    """Commit `offset + 1`, unless the group's committed offset is already past it (a consumer
    that dead-letters an older record must not move its committed offset back)."""
    groups, source = broker.groups, request.report.source
    stored = (await groups.committed(request.group_id)).get(source)
    wanted = request.report.offset + 1
    if stored is not None and stored.offset >= wanted:
        return stored.offset
    commit = OffsetCommit(source.topic, source.partition, wanted, None)
    await groups.commit(
        request.group_id, [commit], member_id=request.member_id, generation=request.generation
    )
    return wanted
