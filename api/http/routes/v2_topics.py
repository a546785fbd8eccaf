"""Confluent REST Proxy v2: topic metadata and brokers (read-only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from api.core.broker import Broker
from api.http import access
from api.http.deps import BrokerDep
from api.http.forwarding import proxy_to_leader
from api.http.wire import TIMESTAMP_MS_MAX
from storage_layout.meta.catalog import TopicInfo

router = APIRouter(tags=["v2 topics"])


def partition_v2(leader_id: int, partition: int) -> dict:
    # No broker replicas: the storage layer keeps the data durable, the leader is its writer.
    replica = {"broker": leader_id, "leader": True, "in_sync": True}
    return {"partition": partition, "leader": leader_id, "replicas": [replica]}


async def leader_id(broker: Broker, topic: str, partition: int) -> int:
    """The partition's leader, or the node that will take it on its first write."""
    leader = await broker.partitions.leader(topic, partition)
    return broker.cluster.preferred(topic, partition) if leader is None else leader


async def partitions_v2(broker: Broker, topic: TopicInfo) -> list[dict]:
    return [
        partition_v2(await leader_id(broker, topic.name, p), p) for p in range(topic.partitions)
    ]


@router.get("/topics", summary="List topic names")
async def list_topics(request: Request, broker: BrokerDep) -> list[str]:
    topics = await broker.topics.list_all()
    return [t.name for t in topics if access.permits(request, "DESCRIBE", "topic", t.name)]


@router.get("/topics/{topic}", summary="Topic metadata: configs and partitions")
async def get_topic(topic: str, broker: BrokerDep) -> dict:
    info = await broker.topics.get(topic)
    partitions = await partitions_v2(broker, info)
    return {"name": info.name, "configs": info.config.to_mapping(), "partitions": partitions}


@router.get("/topics/{topic}/partitions", summary="Partitions of a topic")
async def list_partitions(topic: str, broker: BrokerDep) -> list[dict]:
    return await partitions_v2(broker, await broker.topics.get(topic))


@router.get("/topics/{topic}/partitions/{partition}", summary="One partition")
async def get_partition(topic: str, partition: int, broker: BrokerDep) -> dict:
    return partition_v2(await leader_id(broker, topic, partition), partition)


@router.get(
    "/topics/{topic}/partitions/{partition}/offsets",
    summary="log_start_offset (beginning), high watermark (end), last stable offset, size",
    response_model=None,
)
async def get_partition_offsets(
    topic: str,
    partition: int,
    request: Request,
    broker: BrokerDep,
    timestamp: Annotated[
        int | None,
        Query(
            ge=0,
            le=TIMESTAMP_MS_MAX,
            description="lakelog extension: also return `timestamp_offset`, the earliest offset "
            "whose timestamp (epoch ms) is >= this (null if none; Kafka's offsetsForTimes)",
        ),
    ] = None,
) -> dict | Response:
    leader_url = await broker.partitions.remote_leader_url(topic, partition)
    if leader_url is not None:  # the leader's snapshot is current; ours would need a reload
        return await proxy_to_leader(request, broker, leader_url)
    bounds = await broker.partitions.bounds(topic, partition, stable=True)
    body = {
        "beginning_offset": bounds.log_start_offset,
        "end_offset": bounds.high_watermark,
        # lakelog extension: where read_committed readers end (below end_offset while a
        # transaction is open)
        "last_stable_offset": bounds.last_stable_offset,
        # lakelog extension: the Parquet bytes of the partition's live data files
        "size_bytes": await broker.partitions.size_bytes(topic, partition),
    }
    if timestamp is not None:
        body["timestamp_offset"] = await broker.partitions.offset_for_timestamp(
            topic, partition, timestamp
        )
    return body


@router.get("/brokers", summary="Gateway nodes")
async def list_brokers(broker: BrokerDep) -> dict:
    return {"brokers": broker.cluster.live_nodes()}
