"""Confluent REST Proxy v3: clusters, topics (create, list, get, add partitions, delete),
partitions and topic configs."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from api.core.topic_configs import DescribedConfig, describe_configs
from api.http import access
from api.http.deps import BrokerDep, base_url
from api.http.errors import ApiError
from api.http.routes.v2_topics import leader_id
from api.security.authorizer import CLUSTER_RESOURCE_NAME
from conf.settings import Settings
from storage_layout.meta.catalog import TopicInfo

router = APIRouter(prefix="/v3", tags=["v3 topics"])


class ConfigEntry(BaseModel):
    name: str
    value: str | int | None = None
    # configs:alter only: SET (the default) or DELETE (back to the cluster-wide default)
    operation: Literal["SET", "DELETE", "set", "delete"] | None = None


class ConfigValue(BaseModel):
    value: str | int


class CreateTopic(BaseModel):
    topic_name: str
    partitions_count: int = 1
    replication_factor: int | None = Field(
        default=None, description="Accepted for compatibility; durability comes from storage."
    )
    configs: list[ConfigEntry] = []
    validate_only: bool = False


class UpdateTopic(BaseModel):
    partitions_count: int


class AlterConfigs(BaseModel):
    data: list[ConfigEntry]
    validate_only: bool = False


def check_cluster(cluster_id: str, settings: Settings) -> None:
    if cluster_id != settings.cluster_id:
        raise ApiError(
            404,
            404,
            f"Cluster '{cluster_id}' not found; this gateway serves '{settings.cluster_id}'.",
        )


def _cluster_data(url: str, cluster_id: str, live_nodes: list[int], acls: bool) -> dict:
    """The cluster with links to what this gateway serves (ACLs only with the ACL authorizer;
    no broker configs: lakelog has none a client could change)."""
    self_url = f"{url}/v3/clusters/{cluster_id}"
    paths = [
        ("brokers", "brokers"),
        ("topics", "topics"),
        ("consumer_groups", "consumer-groups"),
        ("partition_reassignments", "topics/-/partitions/-/reassignment"),
    ]
    if acls:
        paths.append(("acls", "acls"))
    related = {name: {"related": f"{self_url}/{path}"} for name, path in paths}
    return {
        "kind": "KafkaCluster",
        "metadata": {"self": self_url, "resource_name": f"crn:///kafka={cluster_id}"},
        "cluster_id": cluster_id,
        # Leadership needs no controller: the lowest live node stands in for one.
        "controller": {"related": f"{self_url}/brokers/{min(live_nodes)}"},
        **related,
    }


def _topic_data(url: str, cluster_id: str, topic: TopicInfo) -> dict:
    self_url = f"{url}/v3/clusters/{cluster_id}/topics/{topic.name}"
    return {
        "kind": "KafkaTopic",
        "metadata": {
            "self": self_url,
            "resource_name": f"crn:///kafka={cluster_id}/topic={topic.name}",
        },
        "cluster_id": cluster_id,
        "topic_name": topic.name,
        "is_internal": False,
        "replication_factor": 1,
        "partitions_count": topic.partitions,
        "partitions": {"related": f"{self_url}/partitions"},
        "configs": {"related": f"{self_url}/configs"},
        "partition_reassignments": {"related": f"{self_url}/partitions/-/reassignment"},
    }


def _partition_data(url: str, cluster_id: str, topic: str, partition: int, node_id: int):
    self_url = f"{url}/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}"
    return {
        "kind": "KafkaPartition",
        "metadata": {
            "self": self_url,
            "resource_name": f"crn:///kafka={cluster_id}/topic={topic}/partition={partition}",
        },
        "cluster_id": cluster_id,
        "topic_name": topic,
        "partition_id": partition,
        "leader": {"related": f"{url}/v3/clusters/{cluster_id}/brokers/{node_id}"},
        "replicas": {"related": f"{self_url}/replicas"},
        "reassignment": {"related": f"{self_url}/reassignment"},
    }


def _config_data(url: str, cluster_id: str, topic: TopicInfo, config: DescribedConfig) -> dict:
    """One config as Kafka describes it: where its value comes from (the topic's own
    setting, the cluster-wide default, or Kafka's default) and its synonyms in precedence
    order (api/core/topic_configs.py)."""
    name = config.name
    self_url = f"{url}/v3/clusters/{cluster_id}/topics/{topic.name}/configs/{name}"
    return {
        "kind": "KafkaTopicConfig",
        "metadata": {
            "self": self_url,
            "resource_name": f"crn:///kafka={cluster_id}/topic={topic.name}/config={name}",
        },
        "cluster_id": cluster_id,
        "topic_name": topic.name,
        "name": name,
        "value": config.value,
        "is_default": config.is_default,
        "is_read_only": False,
        "is_sensitive": False,
        "source": config.source,
        "synonyms": [
            {"name": s.name, "value": s.value, "source": s.source} for s in config.synonyms
        ],
    }


def list_body(kind: str, self_url: str, data: list) -> dict:
    """A v3 list answer: `kind`, its own URL (no paging), the items."""
    return {"kind": kind, "metadata": {"self": self_url, "next": None}, "data": data}


@router.get("/clusters", summary="The one cluster this gateway serves")
async def list_clusters(request: Request, broker: BrokerDep) -> dict:
    settings = broker.settings
    url = base_url(request, settings)
    data = [_cluster_data(url, settings.cluster_id, broker.cluster.live_nodes(), _acls(broker))]
    return list_body("KafkaClusterList", f"{url}/v3/clusters", data)


@router.get("/clusters/{cluster_id}", summary="Cluster")
async def get_cluster(cluster_id: str, request: Request, broker: BrokerDep) -> dict:
    check_cluster(cluster_id, broker.settings)
    url = base_url(request, broker.settings)
    return _cluster_data(url, cluster_id, broker.cluster.live_nodes(), _acls(broker))


def _acls(broker) -> bool:
    return broker.settings.authorizer == "acl"


@router.get("/clusters/{cluster_id}/topics", summary="List topics")
async def list_topics(cluster_id: str, request: Request, broker: BrokerDep) -> dict:
    check_cluster(cluster_id, broker.settings)
    url = base_url(request, broker.settings)
    topics = [
        t
        for t in await broker.topics.list_all()
        if access.permits(request, "DESCRIBE", "topic", t.name)
    ]
    data = [_topic_data(url, cluster_id, t) for t in topics]
    return list_body("KafkaTopicList", f"{url}/v3/clusters/{cluster_id}/topics", data)


@router.post("/clusters/{cluster_id}/topics", status_code=201, summary="Create a topic")
async def create_topic(
    cluster_id: str, body: CreateTopic, request: Request, broker: BrokerDep
) -> dict:
    check_cluster(cluster_id, broker.settings)
    access.require_any(
        request,
        [("CREATE", "cluster", CLUSTER_RESOURCE_NAME), ("CREATE", "topic", body.topic_name)],
    )
    configs = {entry.name: entry.value for entry in body.configs}
    if body.validate_only:
        topic = await broker.topics.validate_new(body.topic_name, body.partitions_count, configs)
    else:
        topic = await broker.topics.create(
            body.topic_name, partitions=body.partitions_count, configs=configs
        )
    return _topic_data(base_url(request, broker.settings), cluster_id, topic)


@router.get("/clusters/{cluster_id}/topics/{topic}", summary="Get a topic")
async def get_topic(cluster_id: str, topic: str, request: Request, broker: BrokerDep) -> dict:
    check_cluster(cluster_id, broker.settings)
    info = await broker.topics.get(topic)
    return _topic_data(base_url(request, broker.settings), cluster_id, info)


@router.patch("/clusters/{cluster_id}/topics/{topic}", summary="Increase the partition count")
async def update_topic(
    cluster_id: str, topic: str, body: UpdateTopic, request: Request, broker: BrokerDep
) -> dict:
    check_cluster(cluster_id, broker.settings)
    info = await broker.topics.alter(topic, partitions=body.partitions_count)
    return _topic_data(base_url(request, broker.settings), cluster_id, info)


@router.delete("/clusters/{cluster_id}/topics/{topic}", status_code=204, summary="Delete a topic")
async def delete_topic(cluster_id: str, topic: str, broker: BrokerDep) -> Response:
    check_cluster(cluster_id, broker.settings)
    await broker.topics.delete(topic)
    return Response(status_code=204)


@router.get("/clusters/{cluster_id}/topics/{topic}/partitions", summary="List partitions")
async def list_partitions(cluster_id: str, topic: str, request: Request, broker: BrokerDep):
    check_cluster(cluster_id, broker.settings)
    info = await broker.topics.get(topic)
    url = base_url(request, broker.settings)
    data = [
        _partition_data(url, cluster_id, topic, p, await leader_id(broker, topic, p))
        for p in range(info.partitions)
    ]
    return list_body(
        "KafkaPartitionList", f"{url}/v3/clusters/{cluster_id}/topics/{topic}/partitions", data
    )


@router.get("/clusters/{cluster_id}/topics/{topic}/partitions/{partition}", summary="Partition")
async def get_partition(
    cluster_id: str, topic: str, partition: int, request: Request, broker: BrokerDep
) -> dict:
    check_cluster(cluster_id, broker.settings)
    url = base_url(request, broker.settings)
    leader = await leader_id(broker, topic, partition)
    return _partition_data(url, cluster_id, topic, partition, leader)


@router.get("/clusters/{cluster_id}/topics/{topic}/configs", summary="Topic configs")
async def list_configs(cluster_id: str, topic: str, request: Request, broker: BrokerDep) -> dict:
    check_cluster(cluster_id, broker.settings)
    info = await broker.topics.get(topic)
    url = base_url(request, broker.settings)
    data = [_config_data(url, cluster_id, info, config) for config in describe_configs(info)]
    return list_body(
        "KafkaTopicConfigList", f"{url}/v3/clusters/{cluster_id}/topics/{topic}/configs", data
    )


@router.get("/clusters/{cluster_id}/topics/{topic}/configs/{name}", summary="One topic config")
async def get_config(
    cluster_id: str, topic: str, name: str, request: Request, broker: BrokerDep
) -> dict:
    check_cluster(cluster_id, broker.settings)
    info = await broker.topics.get(topic)
    configs = {config.name: config for config in describe_configs(info)}
    if name not in configs:
        raise ApiError(
            404,
            40403,
            f"Topic config '{name}' does not exist; known: {', '.join(sorted(configs))}.",
        )
    return _config_data(base_url(request, broker.settings), cluster_id, info, configs[name])


@router.post(
    "/clusters/{cluster_id}/topics/{topic}/configs:alter",
    status_code=204,
    summary="Change topic configs",
)
async def alter_configs(
    cluster_id: str, topic: str, body: Annotated[AlterConfigs, Body()], broker: BrokerDep
) -> Response:
    check_cluster(cluster_id, broker.settings)
    configs = {
        entry.name: None if (entry.operation or "SET").upper() == "DELETE" else entry.value
        for entry in body.data
    }
    await broker.topics.get(topic)
    if body.validate_only:
        broker.topics.validate_configs({k: v for k, v in configs.items() if v is not None})
    else:
        await broker.topics.alter(topic, configs=configs)
    return Response(status_code=204)


@router.put(
    "/clusters/{cluster_id}/topics/{topic}/configs/{name}",
    status_code=204,
    summary="Set one topic config",
)
async def set_config(
    cluster_id: str, topic: str, name: str, body: ConfigValue, broker: BrokerDep
) -> Response:
    check_cluster(cluster_id, broker.settings)
    await broker.topics.alter(topic, configs={name: body.value})
    return Response(status_code=204)


@router.delete(
    "/clusters/{cluster_id}/topics/{topic}/configs/{name}",
    status_code=204,
    summary="Reset one topic config to the cluster-wide default",
)
async def reset_config(cluster_id: str, topic: str, name: str, broker: BrokerDep) -> Response:
    check_cluster(cluster_id, broker.settings)
    await broker.topics.alter(topic, configs={name: None})
    return Response(status_code=204)
