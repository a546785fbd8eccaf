"""HTTP queue consumption of share groups (a lakelog extension of the REST API): acquire records
of a share group's topics from any node, acknowledge them by delivery id.

Each topic partition's share partition lives on the partition's leader, as Kafka's does: this
node serves the partitions it leads (api/core/shares/serving.py) and asks the leader for the
others over the node-to-node routes, so records acquired over HTTP and over Kafka's protocol by
members of one group never overlap.

A delivery id names one delivery of one record to one member (topic, its incarnation,
partition, offset, delivery count, member id), opaque to clients: an acknowledgement carries
everything needed to find the record's share partition, and one of an earlier delivery of a
record delivered again since is refused.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from api.core.broker import Broker
from api.core.errors import BrokerError, NotLeader
from api.core.shares import serving
from api.core.shares.errors import InvalidRecordState, UnknownDeliveryId
from api.core.shares.owner import ShareKey
from api.core.shares.share_partition import AcknowledgeType, Archived
from api.http.wire import records_to_items
from storage_layout.cluster import routes
from storage_layout.errors import StorageError

log = logging.getLogger("lakelog.shares")

_rounds = itertools.count()  # each acquisition starts at another partition: none starves


@dataclass(frozen=True, slots=True)
class DeliveryId:
    """One delivery of one record, as a client acknowledges it."""

    topic: str
    topic_id: str
    partition: int
    offset: int
    delivery_count: int
    member_id: str

    def encode(self) -> str:
        fields = [
            self.topic,
            self.topic_id,
            self.partition,
            self.offset,
            self.delivery_count,
            self.member_id,
        ]
        return base64.urlsafe_b64encode(orjson.dumps(fields)).decode().rstrip("=")

    @classmethod
    def decode(cls, text: object) -> DeliveryId:
        """Raises UnknownDeliveryId: `text` is not a delivery id this API handed out."""
        try:
            raw = base64.urlsafe_b64decode(str(text) + "=" * (-len(str(text)) % 4))
            topic, topic_id, partition, offset, count, member = orjson.loads(raw)
            fields = (str(topic), str(topic_id), int(partition), int(offset), int(count))
            return cls(*fields, str(member))
        except (binascii.Error, ValueError, TypeError, orjson.JSONDecodeError):
            raise UnknownDeliveryId(
                f"{str(text)[:80]!r} is not a delivery id: acknowledge with the 'delivery_id' "
                "of a record an acquisition returned."
            ) from None

    @property
    def partition_of(self) -> tuple[str, str, int, str]:
        return (self.topic, self.topic_id, self.partition, self.member_id)


@dataclass(frozen=True, slots=True)
class Acquisition:
    """What a client asks for: up to `records_max` records of `topics`."""

    group_id: str
    member_id: str
    topics: Sequence[str]
    records_max: int
    bytes_max: int
    lock_duration_ms: int | None
    timeout_ms: int
    embedded: str


async def acquire(broker: Broker, acquisition: Acquisition) -> list[dict]:
    """Records acquired for the member, as v2 consumer items with `delivery_id` and
    `delivery_count`; waits up to `timeout_ms` for the first (woken by commits)."""
    partitions = [
        (topic, p)
        for topic in acquisition.topics
        for p in range((await broker.topics.get(topic)).partitions)
    ]
    start = next(_rounds) % len(partitions)
    ordered = partitions[start:] + partitions[:start]
    deadline = time.monotonic() + acquisition.timeout_ms / 1000
    while True:
        events = broker.commit_events(ordered)
        items = await _acquire_pass(broker, acquisition, ordered)
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if items or remaining_ms <= 0:
            return items
        await broker.wait_for_commits(events, remaining_ms)


async def _acquire_pass(
    broker: Broker, acquisition: Acquisition, ordered: Sequence[tuple[str, int]]
) -> list[dict]:
    items: list[dict] = []
    failures: list[Exception] = []
    for topic, partition in ordered:
        wanted = acquisition.records_max - len(items)
        if wanted <= 0:
            break
        try:
            items += await acquire_partition(broker, acquisition, topic, partition, wanted)
        except NotLeader as error:  # the partition moved or its leader is away: the others
            log.info("share acquisition skipped %s/%s: %s", topic, partition, error)
            failures.append(error)
    if not items and len(failures) == len(ordered):
        raise failures[-1]
    return items


async def acquire_partition(
    broker: Broker, acquisition: Acquisition, topic: str, partition: int, records_max: int
) -> list[dict]:
    """One share partition's acquisition, here or at its leader."""
    url = await broker.partitions.remote_leader_url(topic, partition)
    if url is not None:
        body = {
            "group_id": acquisition.group_id,
            "member_id": acquisition.member_id,
            "records_max": records_max,
            "bytes_max": acquisition.bytes_max,
            "lock_duration_ms": acquisition.lock_duration_ms,
            "embedded": acquisition.embedded,
        }
        path = routes.share_path(routes.SHARE_ACQUIRE_PATH, topic, partition)
        answer = await broker.peers.to_leader(url, None, topic, partition, path, body)
        return answer["records"]
    key = await serving.share_key(broker, acquisition.group_id, topic, partition)
    delivery = await serving.acquire_here(
        broker,
        key,
        acquisition.member_id,
        records_max=records_max,
        bytes_max=acquisition.bytes_max,
        lock_duration_ms=acquisition.lock_duration_ms,
    )
    return delivery_items(delivery, acquisition.member_id, acquisition.embedded)


def delivery_items(delivery: serving.Delivery, member_id: str, embedded: str) -> list[dict]:
    key = delivery.key
    items = records_to_items(
        delivery.records, topic=key.topic, partition=key.partition, embedded=embedded
    )
    counts = {a.offset: a.delivery_count for a in delivery.acquired}
    for item in items:
        count = counts[item["offset"]]
        delivery_id = DeliveryId(
            key.topic, key.topic_id, key.partition, item["offset"], count, member_id
        )
        item["delivery_id"] = delivery_id.encode()
        item["delivery_count"] = count
    return items


# ---- acknowledgements ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """One share partition's acknowledgements: applied, or refused (all of them) and why."""

    delivery_ids: list[str]
    error: Exception | None = None


async def acknowledge(
    broker: Broker, group_id: str, acknowledgements: Sequence[tuple[str, AcknowledgeType]]
) -> list[Outcome]:
    """Apply acknowledgements by delivery id: each share partition's all or none (a
    partition's refusal leaves the others applied).

    Raises:
        UnknownDeliveryId: one is not a delivery id (nothing is applied).
        InvalidRecordState: one delivery id appears twice (nothing is applied).
    """
    by_partition: dict[tuple, list[tuple[DeliveryId, AcknowledgeType, str]]] = {}
    seen: set[str] = set()
    for text, kind in acknowledgements:
        delivery = DeliveryId.decode(text)
        if text in seen:
            raise InvalidRecordState(f"Delivery id {text} is acknowledged twice in one request.")
        seen.add(text)
        by_partition.setdefault(delivery.partition_of, []).append((delivery, kind, text))
    outcomes = []
    for group in by_partition.values():
        ids = [text for _, _, text in group]
        try:
            await acknowledge_partition(broker, group_id, [(d, k) for d, k, _ in group])
        except (BrokerError, StorageError) as error:  # this partition's, the others go on
            outcomes.append(Outcome(ids, error))
        else:
            outcomes.append(Outcome(ids))
    return outcomes


async def acknowledge_partition(
    broker: Broker, group_id: str, acknowledgements: Sequence[tuple[DeliveryId, AcknowledgeType]]
) -> list[Archived] | None:
    """One share partition's acknowledgements (one member's), here or at its leader."""
    first = acknowledgements[0][0]
    url = await broker.partitions.remote_leader_url(first.topic, first.partition)
    if url is not None:
        body = {
            "group_id": group_id,
            "topic_id": first.topic_id,
            "member_id": first.member_id,
            "acknowledgements": [
                [d.offset, int(kind), d.delivery_count] for d, kind in acknowledgements
            ],
        }
        path = routes.share_path(routes.SHARE_ACKNOWLEDGE_PATH, first.topic, first.partition)
        answer = await broker.peers.to_leader(url, None, first.topic, first.partition, path, body)
        if answer.get("refused"):
            raise InvalidRecordState(answer["message"])
        return None
    return await acknowledge_here(broker, group_id, acknowledgements)


async def acknowledge_here(
    broker: Broker, group_id: str, acknowledgements: Sequence[tuple[DeliveryId, AcknowledgeType]]
) -> list[Archived]:
    """One share partition's acknowledgements on its leader, this node (never forwarded)."""
    first = acknowledgements[0][0]
    key = ShareKey(group_id, first.topic, first.partition, first.topic_id)
    await _check_incarnation(broker, key)
    return await serving.acknowledge_here(
        broker,
        key,
        first.member_id,
        [(d.offset, kind) for d, kind in acknowledgements],
        delivery_counts={d.offset: d.delivery_count for d, _ in acknowledgements},
    )


async def _check_incarnation(broker: Broker, key: ShareKey) -> None:
    current = await serving.share_key(broker, key.group_id, key.topic, key.partition)
    if current.topic_id != key.topic_id:
        raise InvalidRecordState(
            f"Topic {key.topic} was deleted and created again since this delivery: its records "
            "are not held any more."
        )
