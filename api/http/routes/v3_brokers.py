"""Confluent REST Proxy v3: brokers (the live gateway nodes), partition replicas and partition
reassignments, so that every link a v3 answer carries resolves.

A lakelog partition has one replica, its table in the shared store, served by its leader: the
replica list names the leader, in sync. Nothing is ever reassigned between replicas (leadership
moves without copying data), so reassignment lists are empty and a partition's reassignment
has no adding or removing replicas.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import APIRouter, Request

from api.http.deps import BrokerDep, base_url
from api.http.errors import ApiError
from api.http.routes.v2_topics import leader_id
from api.http.routes.v3_topics import check_cluster, list_body

router = APIRouter(prefix="/v3", tags=["v3 brokers"])


def _broker_data(url: str, cluster_id: str, node_id: int, node_url: str | None) -> dict:
    address = urlsplit(node_url or "")
    return {
        "kind": "KafkaBroker",
        "metadata": {
            "self": f"{url}/v3/clusters/{cluster_id}/brokers/{node_id}",
            "resource_name": f"crn:///kafka={cluster_id}/broker={node_id}",
        },
        "cluster_id": cluster_id,
        "broker_id": node_id,
        "host": address.hostname,
        "port": address.port,
        "rack": None,
    }


@router.get("/clusters/{cluster_id}/brokers", summary="The live gateway nodes")
async def list_brokers(cluster_id: str, request: Request, broker: BrokerDep) -> dict:
    check_cluster(cluster_id, broker.settings)
    url = base_url(request, broker.settings)
    cluster = broker.cluster
    data = [_broker_data(url, cluster_id, n, cluster.url(n)) for n in cluster.live_nodes()]
    return list_body("KafkaBrokerList", f"{url}/v3/clusters/{cluster_id}/brokers", data)


@router.get("/clusters/{cluster_id}/brokers/{broker_id}", summary="A live gateway node")
async def get_broker(cluster_id: str, broker_id: int, request: Request, broker: BrokerDep):
    check_cluster(cluster_id, broker.settings)
    cluster = broker.cluster
    if broker_id not in cluster.live_nodes():
        raise ApiError(404, 404, f"Broker {broker_id} is not a live node of this cluster.")
    url = base_url(request, broker.settings)
    return _broker_data(url, cluster_id, broker_id, cluster.url(broker_id))


def _partition_url(url: str, cluster_id: str, topic: str, partition: int) -> str:
    return f"{url}/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}"


def _reassignment(url: str, cluster_id: str, topic: str, partition: int) -> dict:
    partition_url = _partition_url(url, cluster_id, topic, partition)
    return {
        "kind": "KafkaReassignment",
        "metadata": {
            "self": f"{partition_url}/reassignment",
            "resource_name": (
                f"crn:///kafka={cluster_id}/topic={topic}/partition={partition}/reassignment"
            ),
        },
        "cluster_id": cluster_id,
        "topic_name": topic,
        "partition_id": partition,
        "adding_replicas": [],
        "removing_replicas": [],
        "replicas": {"related": f"{partition_url}/replicas"},
    }


# The "-" (every topic / every partition) routes come before the ones with a partition id.
@router.get(
    "/clusters/{cluster_id}/topics/-/partitions/-/reassignment",
    summary="Ongoing reassignments of every topic (never any)",
)
async def list_all_reassignments(cluster_id: str, request: Request, broker: BrokerDep) -> dict:
    check_cluster(cluster_id, broker.settings)
    url = base_url(request, broker.settings)
    self_url = f"{url}/v3/clusters/{cluster_id}/topics/-/partitions/-/reassignment"
    return list_body("KafkaReassignmentList", self_url, [])


@router.get(
    "/clusters/{cluster_id}/topics/{topic}/partitions/-/reassignment",
    summary="Ongoing reassignments of a topic (never any)",
)
async def list_reassignments(cluster_id: str, topic: str, request: Request, broker: BrokerDep):
    check_cluster(cluster_id, broker.settings)
    await broker.topics.get(topic)
    url = base_url(request, broker.settings)
    self_url = f"{url}/v3/clusters/{cluster_id}/topics/{topic}/partitions/-/reassignment"
    return list_body("KafkaReassignmentList", self_url, [])


@router.get(
    "/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/reassignment",
    summary="A partition's reassignment: no replica being added or removed",
)
async def get_reassignment(
    cluster_id: str, topic: str, partition: int, request: Request, broker: BrokerDep
) -> dict:
    check_cluster(cluster_id, broker.settings)
    (await broker.topics.get(topic)).check_partition(partition)
    return _reassignment(base_url(request, broker.settings), cluster_id, topic, partition)


async def _replica(request: Request, broker, cluster_id: str, topic: str, partition: int):
    check_cluster(cluster_id, broker.settings)
    (await broker.topics.get(topic)).check_partition(partition)
    url = base_url(request, broker.settings)
    partition_url = _partition_url(url, cluster_id, topic, partition)
    leader = await leader_id(broker, topic, partition)
    replica = {
        "kind": "KafkaReplica",
        "metadata": {
            "self": f"{partition_url}/replicas/{leader}",
            "resource_name": (
                f"crn:///kafka={cluster_id}/topic={topic}/partition={partition}/replica={leader}"
            ),
        },
        "cluster_id": cluster_id,
        "topic_name": topic,
        "partition_id": partition,
        "broker_id": leader,
        "is_leader": True,
        "is_in_sync": True,
        "broker": {"related": f"{url}/v3/clusters/{cluster_id}/brokers/{leader}"},
    }
    return partition_url, replica


@router.get(
    "/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/replicas",
    summary="A partition's replicas: its table, served by the leader",
)
async def list_replicas(
    cluster_id: str, topic: str, partition: int, request: Request, broker: BrokerDep
) -> dict:
    partition_url, replica = await _replica(request, broker, cluster_id, topic, partition)
    return list_body("KafkaReplicaList", f"{partition_url}/replicas", [replica])


@router.get(
    "/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/replicas/{broker_id}",
    summary="The partition's replica on a broker (only its leader has one)",
)
async def get_replica(
    cluster_id: str, topic: str, partition: int, broker_id: int, request: Request, broker: BrokerDep
) -> dict:
    _, replica = await _replica(request, broker, cluster_id, topic, partition)
    if replica["broker_id"] != broker_id:
        raise ApiError(
            404,
            404,
            f"Broker {broker_id} holds no replica of {topic}-{partition}; its leader "
            f"{replica['broker_id']} serves its table.",
        )
    return replica
