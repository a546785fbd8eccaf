"""Reads only a partition's leader answers exactly (its bounds, an offset by timestamp),
asked of the leader over the node-to-node client when it is another node."""

from __future__ import annotations

from api.core.broker import Broker
from api.core.errors import NotLeader
from storage_layout.cluster import routes
from storage_layout.cluster.client import NodeAnswer
from storage_layout.records import PartitionBounds


async def bounds(broker: Broker, topic: str, partition: int) -> PartitionBounds:
    """log_start_offset, high watermark and last stable offset from the partition's leader."""
    url = await broker.partitions.remote_leader_url(topic, partition)
    if url is None:
        return await broker.partitions.bounds(topic, partition, stable=True)
    path = routes.partition_offsets_path(topic, partition)
    body = _ok(await broker.peers.read_from_leader(url, path), url)
    return PartitionBounds(
        body["beginning_offset"], body["end_offset"], body.get("last_stable_offset")
    )


async def offset_for_timestamp(
    broker: Broker, topic: str, partition: int, timestamp_ms: int
) -> int | None:
    """The earliest offset whose timestamp is >= `timestamp_ms` (None: no such record)."""
    url = await broker.partitions.remote_leader_url(topic, partition)
    if url is None:
        return await broker.partitions.offset_for_timestamp(topic, partition, timestamp_ms)
    answer = await broker.peers.read_from_leader(
        url,
        routes.partition_offsets_path(topic, partition),
        params={"timestamp": timestamp_ms},
    )
    return _ok(answer, url)["timestamp_offset"]


def _ok(answer: NodeAnswer, url: str):
    if answer.status != 200:
        text = answer.content[:200].decode(errors="replace")
        raise NotLeader(f"The partition's leader at {url} answered {answer.status}: {text}")
    return answer.json()
