"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs and DescribeCluster.

Topic configs are the catalog's, with their sources as Kafka reports them (a topic's own
setting, the cluster-wide default, Kafka's default; api/core/topic_configs.py). A broker's
configs are the cluster-wide topic defaults under Kafka's broker names (log.retention.ms, ...):
LAKELOG_DEFAULT_* sets them at a node's start, and altering the cluster-wide default broker
resource (`kafka-configs --entity-type brokers --entity-default`) sets them at any time. Per
broker there is nothing to set (every node serves the same topics), so only deleting works
there: Kafka's tools clear replication throttles that way. A group's configs
(`kafka-configs --entity-type groups`) are api/core/group_configs.py's."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from api.core import group_configs, topic_configs
from api.core.errors import InvalidRequest
from api.core.topic_configs import (
    DEFAULT_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
)
from api.kafka.connection import Connection
from api.kafka.errors import error_code, error_message
from api.kafka.handlers.cluster import brokers
from api.security.authorizer import CLUSTER_RESOURCE_NAME
from storage_layout.errors import InvalidConfig
from storage_layout.topic_config import BROKER_NAMES, TopicConfig

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32  # ConfigResource.Type
SOURCES = {DYNAMIC_TOPIC_CONFIG: 1, DYNAMIC_DEFAULT_BROKER_CONFIG: 3, DEFAULT_CONFIG: 5}
GROUP_CONFIG_SOURCE = 8  # ConfigSource.GROUP_CONFIG: the group's own setting
CONFIG_TYPES = {int: 3, bool: 1, str: 2}  # ConfigType: INT, BOOLEAN, STRING
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs operations
STRING_TYPE = 2  # ConfigType, as Kafka's DescribeConfigs v3+ reports it


async def describe_configs(connection: Connection, request, version: int) -> dict:
    results = [
        await _describe(connection, resource, request.include_synonyms)
        for resource in request.resources
    ]
    return {"throttle_time": 0, "results": results}


async def _describe(connection: Connection, resource, include_synonyms: bool) -> dict:
    answer = {
        "resource_type": resource.resource_type,
        "resource_name": resource.resource_name,
        "error_code": ErrorCode.none,
        "error_message": None,
    }
    try:
        if resource.resource_type == TOPIC:
            connection.check("DESCRIBE_CONFIGS", "topic", resource.resource_name)
            configs = await _topic_configs(connection, resource.resource_name, include_synonyms)
        elif resource.resource_type == BROKER:
            connection.check("DESCRIBE_CONFIGS", "cluster", CLUSTER_RESOURCE_NAME)
            configs = await _broker_configs(connection)
        elif resource.resource_type == GROUP:
            connection.check("DESCRIBE_CONFIGS", "group", resource.resource_name)
            configs = await _group_configs(connection, resource.resource_name)
        else:
            raise InvalidRequest(
                f"Config resources of type {resource.resource_type} do not exist here."
            )
    except Exception as error:
        return answer | {
            "error_code": error_code(error),
            "error_message": error_message(error),
            "configs": [],
        }
    wanted = resource.configuration_keys
    if wanted:
        configs = [c for c in configs if c["name"] in set(wanted)]
    return answer | {"configs": configs}


async def _topic_configs(connection: Connection, name: str, include_synonyms: bool) -> list[dict]:
    topic = await connection.broker.topics.describe(name)
    return [
        {
            "name": config.name,
            "value": config.value,
            "read_only": False,
            "config_source": SOURCES[config.source],
            "is_sensitive": False,
            "synonyms": [
                {"name": s.name, "value": s.value, "source": SOURCES[s.source]}
                for s in config.synonyms
            ]
            if include_synonyms
            else [],
            "config_type": STRING_TYPE,
            "documentation": None,
        }
        for config in topic_configs.describe_configs(topic)
    ]


async def _broker_configs(connection: Connection) -> list[dict]:
    defaults = await connection.broker.topics.defaults()
    builtin = TopicConfig().to_mapping()
    return [
        {
            "name": BROKER_NAMES[name],
            "value": defaults.get(name, value),
            "read_only": True,
            "config_source": SOURCES[
                DYNAMIC_DEFAULT_BROKER_CONFIG if name in defaults else DEFAULT_CONFIG
            ],
            "is_sensitive": False,
            "synonyms": [],
            "config_type": STRING_TYPE,
            "documentation": None,
        }
        for name, value in builtin.items()
    ]


async def _group_configs(connection: Connection, group_id: str) -> list[dict]:
    entries = await connection.broker.group_configs.describe(group_id)
    return [
        {
            "name": entry.name,
            "value": entry.value,
            "read_only": False,
            "config_source": SOURCES[DEFAULT_CONFIG] if entry.is_default else GROUP_CONFIG_SOURCE,
            "is_sensitive": False,
            "synonyms": [],
            "config_type": CONFIG_TYPES[group_configs.DEFINITIONS[entry.name].kind],
            "documentation": None,
        }
        for entry in entries
    ]


async def alter_configs(connection: Connection, request, version: int) -> dict:
    """The legacy API: the configs given become the topic's whole set (the others reset)."""
    responses = []
    for resource in request.resources:
        given = {c.name: c.value for c in resource.configs}
        responses.append(
            await _alter(
                connection,
                resource,
                request.validate_only,
                lambda current, given=given: _replace(current, given),
            )
        )
    return {"throttle_time": 0, "responses": responses}


def _replace(current: dict[str, str], given: dict[str, str | None]) -> dict[str, str | None]:
    changes: dict[str, str | None] = dict.fromkeys(current)
    changes.update(given)
    return changes


async def incremental_alter_configs(connection: Connection, request, version: int) -> dict:
    responses = []
    for resource in request.resources:
        entries = list(resource.configs)
        responses.append(
            await _alter(
                connection,
                resource,
                request.validate_only,
                lambda current, entries=entries: _operations(current, entries),
            )
        )
    return {"throttle_time": 0, "responses": responses}


def _operations(current: dict[str, str], entries) -> dict[str, str | None]:
    changes: dict[str, str | None] = {}
    for entry in entries:
        if entry.config_operation == SET:
            changes[entry.name] = entry.value
        elif entry.config_operation == DELETE:
            changes[entry.name] = None
        elif entry.config_operation in (APPEND, SUBTRACT):
            changes[entry.name] = _list_change(current.get(entry.name, ""), entry)
        else:
            raise InvalidRequest(f"Config operation {entry.config_operation} does not exist.")
    return changes


def _list_change(current: str, entry) -> str:
    """APPEND or SUBTRACT for list configs (cleanup.policy: "delete,compact")."""
    items = [item for item in current.split(",") if item]
    given = [item for item in (entry.value or "").split(",") if item]
    if entry.config_operation == APPEND:
        items += [item for item in given if item not in items]
    else:
        items = [item for item in items if item not in given]
    return ",".join(items)


async def _alter(connection: Connection, resource, validate_only: bool, changes_of) -> dict:
    answer = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
    broker = connection.broker
    try:
        if resource.resource_type == BROKER:
            await _alter_broker(connection, resource.resource_name, validate_only, changes_of)
            return answer | {"error_code": ErrorCode.none, "error_message": None}
        if resource.resource_type == GROUP:
            connection.check("ALTER_CONFIGS", "group", resource.resource_name)
            await broker.group_configs.alter(
                resource.resource_name, changes_of, validate_only=validate_only
            )
            return answer | {"error_code": ErrorCode.none, "error_message": None}
        if resource.resource_type != TOPIC:
            raise InvalidRequest(
                f"Config resources of type {resource.resource_type} cannot be altered here."
            )
        connection.check("ALTER_CONFIGS", "topic", resource.resource_name)
        topic = await broker.topics.get(resource.resource_name)
        changes = changes_of(dict(topic.overrides))
        if validate_only:
            merged = {**topic.overrides, **changes}
            broker.topics.validate_configs({k: v for k, v in merged.items() if v is not None})
        else:
            await broker.topics.alter(resource.resource_name, configs=changes)
    except Exception as error:
        return answer | {"error_code": error_code(error), "error_message": error_message(error)}
    return answer | {"error_code": ErrorCode.none, "error_message": None}


async def _alter_broker(connection: Connection, name: str, validate_only: bool, changes_of):
    """A broker resource's changes: the cluster-wide default ("") sets the topic defaults
    under their broker names; a broker's own resource takes deletions only (nothing is ever
    set there).

    Raises:
        InvalidConfig: a name that is no broker config here, or a bad value.
        InvalidRequest: a value set on one broker.
    """
    connection.check("ALTER_CONFIGS", "cluster", CLUSTER_RESOURCE_NAME)
    topics = connection.broker.topics
    current = {BROKER_NAMES[n]: value for n, value in (await topics.defaults()).items()}
    changes = changes_of(current if name == "" else {})
    if name != "":
        if any(value is not None for value in changes.values()):
            raise InvalidRequest(
                f"Broker {name} has no configs of its own: every node serves the same topics. "
                "Set the cluster-wide default (kafka-configs --entity-default)."
            )
        return
    by_topic_name = {broker_name: topic_name for topic_name, broker_name in BROKER_NAMES.items()}
    unknown = sorted(n for n, value in changes.items() if n not in by_topic_name and value)
    if unknown:
        raise InvalidConfig(f"{', '.join(unknown)}: not a broker config lakelog has.")
    known = {by_topic_name[n]: value for n, value in changes.items() if n in by_topic_name}
    await topics.alter_defaults(known, validate_only=validate_only)


async def list_config_resources(connection: Connection, request, version: int) -> dict:
    """KIP-1142 (v1): the resources with configs, by type (empty: every type listed here).
    Topics and brokers as Metadata names them; groups that set configs, or have offsets or
    share-partition state."""
    connection.check("DESCRIBE_CONFIGS", "cluster", CLUSTER_RESOURCE_NAME)
    wanted = set(request.resource_types) or {TOPIC, BROKER, GROUP}
    if not wanted <= {TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP}:
        # the answer has no message field: the code alone says a type is not Kafka's
        return {"throttle_time": 0, "error_code": ErrorCode.invalid_request, "config_resources": []}
    resources = []
    broker = connection.broker
    if TOPIC in wanted:
        topics = await broker.topics.list_all()
        resources += [{"resource_name": t.name, "resource_type": TOPIC} for t in topics]
    if BROKER in wanted:
        nodes = broker.cluster.live_nodes()
        resources += [{"resource_name": str(n), "resource_type": BROKER} for n in nodes]
    if GROUP in wanted:
        named = set(await broker.group_configs.configured_groups())
        named |= set(await broker.shares.stored_groups())
        named |= set(await broker.groups.stored_groups())
        resources += [{"resource_name": g, "resource_type": GROUP} for g in sorted(named)]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "config_resources": resources}


async def describe_cluster(connection: Connection, request, version: int) -> dict:
    if not connection.permits("DESCRIBE", "cluster", CLUSTER_RESOURCE_NAME):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "cluster_id": connection.settings.cluster_id,
            "brokers": [],
        }
    described = [
        {"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": None}
        for b in brokers(connection)
    ]
    answer = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "cluster_id": connection.settings.cluster_id,
        "controller_id": connection.broker.cluster.node_id,
        "brokers": described,
    }
    if request.include_cluster_authorized_operations:
        operations = connection.authorized_operations("cluster", CLUSTER_RESOURCE_NAME)
        answer["cluster_authorized_operations"] = operations
    return answer
