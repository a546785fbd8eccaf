"""Confluent REST Proxy v2: topic metadata and brokers (read-only)."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import BrokerDep
from storage_layout.catalog import TopicInfo

router = APIRouter(tags=["v2 topics"])


def partition_v2(node_id: int, partition: int) -> dict:
    # One storage layer, no replicas: this node leads every partition it serves.
    replica = {"broker": node_id, "leader": True, "in_sync": True}
    return {"partition": partition, "leader": node_id, "replicas": [replica]}


def topic_v2(topic: TopicInfo, node_id: int) -> dict:
    return {
        "name": topic.name,
        "configs": topic.config.to_mapping(),
        "partitions": [partition_v2(node_id, p) for p in range(topic.partitions)],
    }


@router.get("/topics", summary="List topic names")
async def list_topics(broker: BrokerDep) -> list[str]:
    return [topic.name for topic in await broker.list_topics()]


@router.get("/topics/{topic}", summary="Topic metadata: configs and partitions")
async def get_topic(topic: str, broker: BrokerDep) -> dict:
    return topic_v2(await broker.topic(topic), broker.settings.node_id)


@router.get("/topics/{topic}/partitions", summary="Partitions of a topic")
async def list_partitions(topic: str, broker: BrokerDep) -> list[dict]:
    info = await broker.topic(topic)
    return [partition_v2(broker.settings.node_id, p) for p in range(info.partitions)]


@router.get("/topics/{topic}/partitions/{partition}", summary="One partition")
async def get_partition(topic: str, partition: int, broker: BrokerDep) -> dict:
    (await broker.topic(topic)).check_partition(partition)
    return partition_v2(broker.settings.node_id, partition)


@router.get(
    "/topics/{topic}/partitions/{partition}/offsets",
    summary="log_start_offset (beginning) and high watermark (end) of a partition",
)
async def get_partition_offsets(topic: str, partition: int, broker: BrokerDep) -> dict:
    bounds = await broker.partition_bounds(topic, partition)
    return {"beginning_offset": bounds.log_start_offset, "end_offset": bounds.high_watermark}


@router.get("/brokers", summary="Gateway nodes")
async def list_brokers(broker: BrokerDep) -> dict:
    return {"brokers": [broker.settings.node_id]}
