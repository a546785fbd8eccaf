"""Partition reads served wherever the partition is led: this node's log, or its leader over
HTTP (the same stateless routes a client would call). Consumer instances and group lag need
them for partitions that other nodes lead."""

from __future__ import annotations

from dataclasses import dataclass

from api.core import leader_reads
from api.core.broker import Broker
from api.core.errors import NotLeader
from api.core.records import FetchRequest
from api.http.forwarding import NEXT_OFFSET_HEADER
from api.http.wire import RECORD_MEDIA_TYPES, records_to_items
from storage_layout.cluster.client import NodeAnswer
from storage_layout.errors import OffsetOutOfRange
from storage_layout.records import Isolation


@dataclass(frozen=True, slots=True)
class FetchedItems:
    """v2 consumer items, and where the next fetch goes on (None: nothing was read)."""

    items: list[dict]
    next_offset: int | None


async def fetch_items(
    broker: Broker,
    topic: str,
    partition: int,
    *,
    offset: int,
    bytes_max: int,
    timeout_ms: int,
    embedded: str,
    isolation: Isolation = Isolation.PLAIN,
) -> FetchedItems:
    """Records from `offset` as v2 consumer items; long-polls up to `timeout_ms`.

    Raises:
        OffsetOutOfRange: `offset` is below log_start_offset or above the high watermark.
    """
    url = await broker.partitions.remote_leader_url(topic, partition)
    request = FetchRequest(topic, partition, offset, bytes_max, timeout_ms, isolation)
    if url is None:
        result = await broker.fetch(request)
    else:  # committed records from the shared table; the head from the leader
        result = await broker.read_as_follower(request)
    if result is not None:
        items = records_to_items(
            result.records, topic=topic, partition=partition, embedded=embedded
        )
        return FetchedItems(items, result.next_offset)
    params = {"offset": offset, "max_bytes": bytes_max, "timeout": timeout_ms}
    params["isolation.level"] = "read_committed" if isolation.needs_index else "read_uncommitted"
    answer = await broker.peers.read_from_leader(
        url,
        f"/topics/{topic}/partitions/{partition}/records",
        params=params,
        headers={"Accept": RECORD_MEDIA_TYPES[embedded]},
    )
    if answer.status == 416:
        remote = await leader_reads.bounds(broker, topic, partition)
        raise OffsetOutOfRange(offset, remote.log_start_offset, remote.high_watermark)
    next_offset = answer.headers.get(NEXT_OFFSET_HEADER)
    return FetchedItems(_ok(answer, url), int(next_offset) if next_offset else None)


def _ok(answer: NodeAnswer, url: str):
    if answer.status != 200:
        text = answer.content[:200].decode(errors="replace")
        raise NotLeader(f"The partition's leader at {url} answered {answer.status}: {text}")
    return answer.json()
