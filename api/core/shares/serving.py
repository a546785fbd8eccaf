"""Share groups served on the partition's leader: what both front-ends call for a topic
partition this node leads (Kafka's ShareFetch and ShareAcknowledge are sent to the leader; the
HTTP queue routes reach it over the node-to-node routes).

The group's configs (api/core/group_configs.py) decide where a new share partition starts
(share.auto.offset.reset), which records it delivers (share.isolation.level), its locks and
limits, and where records archived after delivery go (errors.deadletterqueue.topic.name).
Protocol-neutral: answers are records as the table holds them, with their deliveries.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from api.core import leader_reads, metrics
from api.core.broker import Broker
from api.core.errors import InvalidRequest, NotLeader
from api.core.group_configs import BY_DURATION, ShareSettings, duration_ms
from api.core.groups.dead_letters import DeadLetterReport, write_dead_letter
from api.core.groups.errors import InvalidGroupRequest, RecordNotFound
from api.core.records import FetchRequest
from api.core.shares.owner import LogRead, ShareKey
from api.core.shares.share_partition import AcknowledgeType, Acquired, Archived
from storage_layout.errors import OffsetOutOfRange, TopicNotFound
from storage_layout.records import TopicPartition

log = logging.getLogger("lakelog.shares")


@dataclass(frozen=True, slots=True)
class Delivery:
    """Records acquired for a member from one share partition: `records` holds their rows (in
    offset order), `acquired` their deliveries."""

    key: ShareKey
    records: pa.Table
    acquired: list[Acquired]


async def share_key(broker: Broker, group_id: str, topic: str, partition: int) -> ShareKey:
    """The share partition of `group_id` for the topic's current incarnation.

    Raises:
        TopicNotFound, PartitionNotFound: no such topic partition.
    """
    info = await broker.topics.get(topic)
    info.check_partition(partition)
    return ShareKey(group_id, topic, partition, info.topic_id)


async def _check_leads(broker: Broker, key: ShareKey) -> None:
    """Share partitions are served where the topic partition is led (taken here if free).

    Raises:
        NotLeader: another node leads it (its id attached).
    """
    route = await broker.leaders.route(key.topic, key.partition)
    if route.writer is None:
        raise NotLeader(
            f"Node {route.leader_id} leads {key.topic}/{key.partition}: its share partitions "
            "are served there.",
            leader_id=route.leader_id,
        )


async def acquire_here(
    broker: Broker,
    key: ShareKey,
    member_id: str,
    *,
    records_max: int,
    bytes_max: int,
    lock_duration_ms: int | None = None,
) -> Delivery:
    """Acquire up to `records_max` records of a share partition this node leads for
    `member_id`, locked for the group's lock duration (or `lock_duration_ms`).

    Raises:
        NotLeader: another node leads the topic partition.
        NotShareOwner: another node took its share states meanwhile.
    """
    await _check_leads(broker, key)
    settings = await broker.group_configs.share_settings(key.group_id)
    limits = settings.limits
    if lock_duration_ms is not None:
        limits = replace(limits, lock_duration_ms=lock_duration_ms)
    reads: list[pa.Table] = []

    async def read(offset: int, _records_max: int) -> LogRead:
        found, table = await _read(broker, key, settings, offset, bytes_max)
        reads.append(table)
        return found

    async def start_offset() -> int:
        return await _start_offset(broker, key, settings)

    acquired = await broker.shares.acquire(
        key,
        member_id,
        records_max=records_max,
        limits=limits,
        read=read,
        start_offset=start_offset,
    )
    if acquired:
        metrics.SHARE_ACQUIRED.labels(key.group_id).inc(len(acquired))
    return Delivery(key, _rows(reads[-1] if reads else None, acquired), acquired)


async def acknowledge_here(
    broker: Broker,
    key: ShareKey,
    member_id: str,
    acknowledgements: Sequence[tuple[int, AcknowledgeType]],
    *,
    delivery_counts: Mapping[int, int] | None = None,
) -> list[Archived]:
    """Apply a member's acknowledgements to a share partition this node leads, all or none.

    Raises:
        InvalidRecordState: a record the member does not hold (nothing changes).
        NotLeader: another node leads the topic partition.
        NotShareOwner: another node took its share states meanwhile.
    """
    await _check_leads(broker, key)
    settings = await broker.group_configs.share_settings(key.group_id)
    if not settings.renew_enabled and any(k == AcknowledgeType.RENEW for _, k in acknowledgements):
        raise InvalidRequest(
            f"Group {key.group_id!r} has share.renew.acknowledge.enable=false: locks cannot "
            "be renewed."
        )
    archived = await broker.shares.acknowledge(
        key,
        member_id,
        acknowledgements,
        limits=settings.limits,
        delivery_counts=delivery_counts,
    )
    for kind, count in Counter(kind for _, kind in acknowledgements).items():
        metrics.SHARE_ACKNOWLEDGED.labels(key.group_id, kind.name.lower()).inc(count)
    return archived


async def release_here(broker: Broker, key: ShareKey, member_id: str) -> None:
    """What `member_id` holds of a share partition this node leads is available again (its
    share session closed)."""
    await _check_leads(broker, key)
    settings = await broker.group_configs.share_settings(key.group_id)
    await broker.shares.release_member(key, member_id, limits=settings.limits)


async def reset_here(broker: Broker, key: ShareKey, start_offset: int | None) -> None:
    """An administrator's reset of a share partition this node leads (ShareOwner.reset)."""
    await _check_leads(broker, key)
    await broker.shares.reset(key, start_offset)


async def _read(
    broker: Broker, key: ShareKey, settings: ShareSettings, offset: int, bytes_max: int
) -> tuple[LogRead, pa.Table]:
    """What the log holds from `offset` (from its start, if that moved past `offset`)."""
    log_start = 0
    request = FetchRequest(key.topic, key.partition, offset, bytes_max, 0, settings.isolation)
    try:
        result = await broker.read_now(request)
    except OffsetOutOfRange as error:
        if offset >= error.log_start_offset:  # past the end: nothing to deliver yet
            return LogRead((), offset), _empty()
        log_start = error.log_start_offset
        request = replace(request, offset=log_start)
        result = await broker.read_now(request)
    records = result.records
    offsets = records.column("offset").to_pylist() if records.num_rows else []
    read_to = result.next_offset if result.next_offset is not None else request.offset
    return LogRead(offsets, read_to, max(log_start, result.log_start_offset)), records


def _empty() -> pa.Table:
    return pa.table({"offset": pa.array([], pa.int64())})


async def _start_offset(broker: Broker, key: ShareKey, settings: ShareSettings) -> int:
    """Where a share partition without state starts (share.auto.offset.reset)."""
    bounds = await leader_reads.bounds(broker, key.topic, key.partition)
    policy = settings.auto_offset_reset
    if policy == "earliest":
        return bounds.log_start_offset
    if policy.startswith(BY_DURATION):
        since_ms = int(time.time() * 1000) - (duration_ms(policy[len(BY_DURATION) :]) or 0)
        found = await leader_reads.offset_for_timestamp(broker, key.topic, key.partition, since_ms)
        if found is not None:
            return found
    return bounds.end_offset(settings.isolation)


def _rows(table: pa.Table | None, acquired: Sequence[Acquired]) -> pa.Table:
    if table is None or not acquired:
        return (table if table is not None else _empty()).slice(0, 0)
    wanted = pa.array([a.offset for a in acquired], pa.int64())
    return table.filter(pc.is_in(table.column("offset"), value_set=wanted))


async def dead_letter_archived(broker: Broker, key: ShareKey, archived: list[Archived]) -> None:
    """Copy records archived after delivery to the group's dead letter topic, if it has one
    (errors.deadletterqueue.topic.name). At least once: the archive is stored after this, so
    a failure here refuses the change and a retry copies again; the `lakelog.dlq.source.*`
    headers identify repeats."""
    for reason, count in Counter(str(record.reason) for record in archived).items():
        metrics.SHARE_ARCHIVED.labels(key.group_id, reason).inc(count)
    settings = await broker.group_configs.share_settings(key.group_id)
    if settings.dead_letter_topic is None:
        return
    for record in archived:
        report = DeadLetterReport(
            TopicPartition(key.topic, key.partition),
            record.offset,
            error=str(record.reason),
            attempts=record.delivery_count,
            dead_letter_topic=settings.dead_letter_topic,
        )
        try:
            await write_dead_letter(
                broker, report, group_id=key.group_id, copy_record=settings.copy_record
            )
        except (TopicNotFound, OffsetOutOfRange, RecordNotFound, InvalidGroupRequest) as gone:
            log.warning("share group %s: no dead letter for %s: %s", key.group_id, report, gone)
