"""Consumer groups over the Kafka protocol: FindCoordinator, the classic group protocol
(JoinGroup, SyncGroup, Heartbeat, LeaveGroup: the leader member assigns), OffsetCommit and
OffsetFetch on the Delta offsets table, ListGroups and DescribeGroups. The same coordinator
serves the HTTP group APIs; a node that does not coordinate the group answers NOT_COORDINATOR
and the client asks FindCoordinator again, as with Kafka."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from api.core.groups.consumer_protocol import BadConsumerProtocol, decode_subscription
from api.core.groups.errors import GroupNotFound, UnsupportedGroupVersion
from api.core.groups.group import JoinRequest, Subscription
from api.core.shares import admin as share_admin
from api.kafka.connection import Connection
from api.kafka.errors import error_code, error_message
from api.kafka.messages import milliseconds
from storage_layout.meta.consumer_offsets import OffsetCommit
from storage_layout.records import TopicPartition

GROUP_KEY, TRANSACTION_KEY = 0, 1
NO_GENERATION = -1


# ---- FindCoordinator ---------------------------------------------------------------------------


async def find_coordinator(connection: Connection, request, version: int) -> dict:
    if version >= 4:
        keys = list(request.coordinator_keys)
        found = [_coordinator(connection, key, request.key_type) for key in keys]
        return {
            "throttle_time": 0,
            "coordinators": [{"key": k, **f} for k, f in zip(keys, found, strict=True)],
        }
    key_type = getattr(request, "key_type", GROUP_KEY)
    return {"throttle_time": 0, **_coordinator(connection, request.key, key_type)}


def _coordinator(connection: Connection, key: str, key_type: int) -> dict:
    unknown = {"node_id": -1, "host": "", "port": -1}
    if key_type not in (GROUP_KEY, TRANSACTION_KEY):
        message = f"Coordinator key type {key_type} is not served (0: group, 1: transaction)."
        return unknown | {"error_code": ErrorCode.invalid_request, "error_message": message}
    resource, codes = "group", ErrorCode.group_authorization_failed
    if key_type == TRANSACTION_KEY:
        resource, codes = "transactional_id", ErrorCode.transactional_id_authorization_failed
    if not connection.permits("DESCRIBE", resource, key):
        message = f"{connection.principal} may not DESCRIBE {resource} '{key}'."
        return unknown | {"error_code": codes, "error_message": message}
    broker = connection.broker
    if key_type == TRANSACTION_KEY:
        node = broker.transactions.coordinator_of(key)
    else:
        node = broker.groups.coordinator_of(key)
    address = broker.cluster.kafka_address(node)
    if address is None:
        message = f"Node {node} coordinates the group but serves no Kafka listener."
        return unknown | {
            "error_code": ErrorCode.coordinator_not_available,
            "error_message": message,
        }
    host, _, port = address.rpartition(":")
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "node_id": node,
        "host": host,
        "port": int(port),
    }


# ---- membership ----------------------------------------------------------------------------


async def join_group(connection: Connection, request, version: int) -> dict:
    session_ms = milliseconds(request.session_timeout)
    rebalance_ms = milliseconds(getattr(request, "rebalance_timeout", request.session_timeout))
    join = JoinRequest(
        member_id=request.member_id or None,
        client_id=connection.client_id or "",
        group_instance_id=getattr(request, "group_instance_id", None),
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        subscription=_subscription(request),
        assignors=tuple(p.name for p in request.protocols),
        protocol_metadata=tuple((p.name, p.metadata) for p in request.protocols),
        protocol_type=request.protocol_type,
    )
    try:
        connection.check("READ", "group", request.group_id)
        result = await connection.broker.groups.join(request.group_id, join)
    except Exception as error:
        return {
            "throttle_time": 0,
            "error_code": error_code(error),
            "generation_id": NO_GENERATION,
            "protocol_name": None,
            "leader": "",
            "member_id": request.member_id,
            "members": [],
        }
    is_leader = result.member_id == result.leader_id
    members = [
        {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
        for m in result.members
        if is_leader
    ]
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "generation_id": result.generation,
        "protocol_type": request.protocol_type,
        "protocol_name": result.protocol,
        "leader": result.leader_id,
        "member_id": result.member_id,
        "members": members,
    }


def _subscription(request) -> Subscription:
    """The topics a consumer subscribes to, from its first protocol's metadata (other protocol
    types, e.g. Kafka Connect's, have none the coordinator can read)."""
    if request.protocol_type != "consumer" or not request.protocols:
        return Subscription()
    try:
        decoded = decode_subscription(request.protocols[0].metadata)
    except BadConsumerProtocol:
        return Subscription()
    return Subscription(topics=frozenset(decoded.topics))


async def sync_group(connection: Connection, request, version: int) -> dict:
    assignments = {a.member_id: a.assignment for a in request.assignments} or None
    try:
        connection.check("READ", "group", request.group_id)
        assignment = await connection.broker.groups.sync_client_assigned(
            request.group_id, request.member_id, request.generation_id, assignments
        )
    except Exception as error:
        return {"throttle_time": 0, "error_code": error_code(error), "assignment": b""}
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "protocol_type": getattr(request, "protocol_type", None),
        "protocol_name": getattr(request, "protocol_name", None),
        "assignment": assignment,
    }


async def heartbeat(connection: Connection, request, version: int) -> dict:
    try:
        connection.check("READ", "group", request.group_id)
        await connection.broker.groups.heartbeat(
            request.group_id, request.member_id, request.generation_id
        )
    except Exception as error:
        return {"throttle_time": 0, "error_code": error_code(error)}
    return {"throttle_time": 0, "error_code": ErrorCode.none}


async def leave_group(connection: Connection, request, version: int) -> dict:
    groups = connection.broker.groups
    if not connection.permits("READ", "group", request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    if version < 3:
        try:
            await groups.leave(request.group_id, request.member_id)
        except Exception as error:
            return {"throttle_time": 0, "error_code": error_code(error)}
        return {"throttle_time": 0, "error_code": ErrorCode.none}
    results = []
    for member in request.members:
        code = ErrorCode.none
        try:
            if member.member_id or not member.group_instance_id:
                await groups.leave(request.group_id, member.member_id)
            else:
                await groups.remove_static_member(request.group_id, member.group_instance_id)
        except Exception as error:
            code = error_code(error)
        results.append(
            {
                "member_id": member.member_id,
                "group_instance_id": member.group_instance_id,
                "error_code": code,
            }
        )
    return {"throttle_time": 0, "error_code": ErrorCode.none, "members": results}


# ---- offsets -------------------------------------------------------------------------------


async def offset_commit(connection: Connection, request, version: int) -> dict:
    member_id = request.member_id or None
    # A consumer without a group membership (assign(), Kafka's "simple" consumer) commits
    # with generation -1 and no member id: allowed while the group has no members.
    generation = request.generation_id_or_member_epoch if member_id else NO_GENERATION
    commits = [
        OffsetCommit(
            topic.name,
            p.partition_index,
            p.committed_offset,
            p.committed_metadata,
            leader_epoch=getattr(p, "committed_leader_epoch", -1),  # v6+
        )
        for topic in request.topics
        for p in topic.partitions
    ]
    code = ErrorCode.none
    try:
        connection.check("READ", "group", request.group_id)
        await _check_topics(connection, commits)
        if member_id and version < 9:
            await _check_member_epochs(connection, request.group_id, member_id)
        if commits:
            await connection.broker.groups.commit(
                request.group_id, commits, member_id=member_id, generation=generation
            )
    except Exception as error:
        code = error_code(error)
    topics = [
        {
            "name": topic.name,
            "partitions": [
                {"partition_index": p.partition_index, "error_code": code} for p in topic.partitions
            ],
        }
        for topic in request.topics
    ]
    return {"throttle_time": 0, "topics": topics}


async def _check_member_epochs(connection: Connection, group_id: str, member_id: str) -> None:
    """Consumer protocol members (KIP-848) commit with their epochs: OffsetCommit v9+."""
    if await connection.broker.groups.uses_member_epochs(group_id, member_id):
        raise UnsupportedGroupVersion(
            f"Member {member_id} of consumer group '{group_id}' commits with OffsetCommit v9+."
        )


async def _check_topics(connection: Connection, commits: list[OffsetCommit]) -> None:
    for name in {commit.topic for commit in commits}:
        connection.check("READ", "topic", name)
        topic = await connection.broker.topics.get(name)
        for commit in commits:
            if commit.topic == name:
                topic.check_partition(commit.partition)


async def offset_fetch(connection: Connection, request, version: int) -> dict:
    """OffsetFetch: one group up to v7, several from v8 (Kafka's batched form), where v9
    names the fetching member of a KIP-848 group and its epoch."""
    stable = getattr(request, "require_stable", False)
    if version < 8:
        fetched = await _fetch_group(connection, request.group_id, request.topics, stable)
        return {"throttle_time": 0, **fetched}
    groups = [
        await _fetch_group(
            connection,
            group.group_id,
            group.topics,
            stable,
            member=(getattr(group, "member_id", None), getattr(group, "member_epoch", -1)),
        )
        for group in request.groups
    ]
    return {"throttle_time": 0, "groups": groups}


async def _fetch_group(
    connection: Connection, group_id: str, wanted_topics, stable: bool, member=(None, -1)
) -> dict:
    groups = connection.broker.groups
    try:
        connection.check("DESCRIBE", "group", group_id)
        member_id, member_epoch = member
        if member_id:
            await groups.check_member_epoch(group_id, member_id, member_epoch)
        stored = await groups.committed(group_id)
    except Exception as error:
        return {"group_id": group_id, "topics": [], "error_code": error_code(error)}
    if wanted_topics is None:
        wanted: dict[str, list[int]] = {}
        for tp in sorted(stored):
            wanted.setdefault(tp.topic, []).append(tp.partition)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in wanted_topics}
    # KIP-447: not while a transaction may move it
    unstable = groups.unstable_partitions(group_id) if stable else set()
    topics = [
        {"name": name, "partitions": _fetched(name, partitions, stored, unstable)}
        for name, partitions in wanted.items()
        # as Kafka: offsets of topics the principal may not see are left out
        if connection.permits("DESCRIBE", "topic", name)
    ]
    return {"group_id": group_id, "topics": topics, "error_code": ErrorCode.none}


def _fetched(name: str, partitions: list[int], stored: dict, unstable: set) -> list[dict]:
    entries = []
    for index in partitions:
        committed = stored.get(TopicPartition(name, index))
        code = ErrorCode.none
        if TopicPartition(name, index) in unstable:
            code = ErrorCode.unstable_offset_commit
        entries.append(
            {
                "partition_index": index,
                "committed_offset": -1 if committed is None else committed.offset,
                "committed_leader_epoch": -1 if committed is None else committed.leader_epoch,
                "metadata": None if committed is None else committed.metadata,
                "error_code": code,
            }
        )
    return entries


# ---- admin ---------------------------------------------------------------------------------


async def list_groups(connection: Connection, request, version: int) -> dict:
    groups = connection.broker.groups
    wanted_states = {s.lower() for s in getattr(request, "states_filter", ())}
    wanted_types = {t.lower() for t in getattr(request, "types_filter", ())}
    listed = []
    for group_id in sorted(set(await groups.stored_groups()) | set(groups.local_groups())):
        if groups.coordinator_of(group_id) != groups.node_id:
            continue  # each coordinator lists its own groups, as Kafka's brokers do
        if not connection.permits("DESCRIBE", "group", group_id):
            continue
        try:
            # GroupNotFound: no members, no offsets (deleted)
            description = await groups.describe(group_id)
        except Exception:
            continue
        if wanted_states and description.state.lower() not in wanted_states:
            continue
        if wanted_types and description.group_type not in wanted_types:
            continue
        listed.append(
            {
                "group_id": group_id,
                "protocol_type": description.protocol_type or "consumer",
                "group_state": description.state,
                "group_type": description.group_type,  # v5 (KIP-848): classic or consumer
            }
        )
    if not wanted_types or "share" in wanted_types:
        listed += await _share_groups(connection, wanted_states)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": listed}


async def _share_groups(connection: Connection, wanted_states: set[str]) -> list[dict]:
    """The share groups this node coordinates (share_admin.share_group_ids)."""
    broker = connection.broker
    listed = []
    for group_id in await share_admin.share_group_ids(broker):
        if broker.groups.coordinator_of(group_id) != broker.groups.node_id:
            continue
        if not connection.permits("DESCRIBE", "group", group_id):
            continue
        state = share_admin.known_group_view(broker, group_id).state
        if wanted_states and state.lower() not in wanted_states:
            continue
        listed.append(
            {
                "group_id": group_id,
                "protocol_type": "share",
                "group_state": state,
                "group_type": "share",
            }
        )
    return listed


async def describe_groups(connection: Connection, request, version: int) -> dict:
    described = [await _describe(connection, group_id) for group_id in request.groups]
    return {"throttle_time": 0, "groups": described}


async def _describe(connection: Connection, group_id: str) -> dict:
    groups = connection.broker.groups
    try:
        connection.check("DESCRIBE", "group", group_id)
        description = await groups.describe(group_id)
    except GroupNotFound:
        return _dead(group_id, ErrorCode.none)
    except Exception as error:
        return _dead(group_id, error_code(error)) | {"error_message": error_message(error)}
    members = [
        {
            "member_id": m.member_id,
            "group_instance_id": m.group_instance_id,
            "client_id": m.client_id,
            "client_host": "",
            "member_metadata": m.metadata or b"",
            "member_assignment": m.assignment_bytes or b"",
        }
        for m in description.members
    ]
    return {
        "error_code": ErrorCode.none,
        "group_id": group_id,
        "group_state": description.state,
        "protocol_type": description.protocol_type or "",
        "protocol_data": description.protocol or "",
        "members": members,
    }


def _dead(group_id: str, code: ErrorCode) -> dict:
    return {
        "error_code": code,
        "group_id": group_id,
        "group_state": "Dead",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
    }


async def delete_groups(connection: Connection, request, version: int) -> dict:
    results = []
    for group_id in request.groups_names:
        code = ErrorCode.none
        try:
            connection.check("DELETE", "group", group_id)
            await _delete_group(connection, group_id)
        except Exception as error:
            code = error_code(error)
        results.append({"group_id": group_id, "error_code": code})
    return {"throttle_time": 0, "results": results}


async def _delete_group(connection: Connection, group_id: str) -> None:
    """A consumer group, else a share group (its share-partition states and configs)."""
    try:
        await connection.broker.groups.delete_group(group_id)
    except GroupNotFound:
        await share_admin.delete_group(connection.broker, group_id)


async def offset_delete(connection: Connection, request, version: int) -> dict:
    wanted = [
        TopicPartition(topic.name, p.partition_index)
        for topic in request.topics
        for p in topic.partitions
    ]
    try:
        connection.check("DELETE", "group", request.group_id)
        allowed = [tp for tp in wanted if connection.permits("READ", "topic", tp.topic)]
        outcome = await connection.broker.groups.delete_offsets(request.group_id, allowed)
    except Exception as error:
        return {"throttle_time": 0, "error_code": error_code(error), "topics": []}
    topics: dict[str, list[dict]] = {}
    for tp in wanted:
        if tp not in outcome:
            code = ErrorCode.topic_authorization_failed
        else:
            code = ErrorCode.none if outcome[tp] is None else error_code(outcome[tp])
        topics.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "error_code": code}
        )
    answer = [{"name": name, "partitions": partitions} for name, partitions in topics.items()]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "topics": answer}
