"""Confluent REST Proxy v3: read-only consumer group views (groups, consumers, assignments, lag).

Shapes follow Confluent's `ConsumerGroupData`, `ConsumerData`, `ConsumerAssignmentData`,
`ConsumerLagData` and `ConsumerGroupLagSummaryData`. Routes of one group are answered by the
group's coordinator (other nodes forward the request there, as the native group API does); the
group list asks every live node for the groups it coordinates and merges the answers with the
groups that have stored offsets.

Choices where Confluent is silent or odd:
- Lag is reported for partitions with a committed offset only, as Confluent does: an assigned
  partition without one has no `current_offset`, so it is left out (it shows up in
  `lakelog groups describe` with `-`, as in Kafka's tool). `lag` is
  `max(0, log_end_offset - current_offset)`; `log_end_offset` is the last stable offset (the
  high watermark unless a transaction is open), as Confluent's lag reads the ends with
  READ_COMMITTED: records of an open transaction are not yet there to consume.
- The lag list of a group without committed offsets is an empty list (Confluent answers 404);
  the lag summary then is 404 (error_code 404), as in Confluent, since there is no maximum.
- `is_simple` is true while the group has no members: its offsets are only committed by
  clients that assign partitions themselves (Kafka's "simple" groups), or by admin resets.
- A lag's `metadata.self` is the lag's own URL under the group; `resource_name` is Confluent's
  `crn:///kafka=<c>/topic=<t>/partition=<p>/lag=<g>`.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Query, Request

from api.core.broker import Broker
from api.core.group_lag import PartitionLag, group_lags
from api.core.groups.coordinator import CLASSIC, GroupDescription
from api.core.groups.group import GroupState, MemberView
from api.core.lag_history import LagHistory, LagSample
from api.http import access
from api.http.deps import BrokerDep, base_url
from api.http.errors import ApiError
from api.http.forwarding import served_by_coordinator
from api.http.routes.internal import group_summary, local_group_summaries
from api.http.routes.v3_topics import check_cluster, list_body
from storage_layout.records import TopicPartition

router = APIRouter(prefix="/v3/clusters/{cluster_id}/consumer-groups", tags=["v3 consumer groups"])

NODE_LIST_TIMEOUT_MS = 5_000  # a live node slower than this is skipped by the group list


@dataclass(frozen=True, slots=True)
class Links:
    """Where a response's links point: `base` is `<url>/v3/clusters/<cluster_id>`."""

    base: str
    cluster_id: str

    def group(self, group_id: str) -> str:
        return f"{self.base}/consumer-groups/{group_id}"

    def partition(self, tp: TopicPartition) -> str:
        return f"{self.base}/topics/{tp.topic}/partitions/{tp.partition}"

    def crn(self, *parts: str) -> str:
        return "/".join([f"crn:///kafka={self.cluster_id}", *parts])


# ---- routes ------------------------------------------------------------------------------


@router.get("", summary="List consumer groups (every node's)", response_model=None)
async def list_groups(cluster_id: str, request: Request, broker: BrokerDep) -> dict:
    check_cluster(cluster_id, broker.settings)
    links = _links(request, broker, cluster_id)
    summaries = await _cluster_groups(broker)
    allowed = [g for g in sorted(summaries) if access.permits(request, "DESCRIBE", "group", g)]
    data = [_group_data(links, summaries[g]) for g in allowed]
    return list_body("KafkaConsumerGroupList", f"{links.base}/consumer-groups", data)


@router.get("/{group}", summary="Consumer group", response_model=None)
@served_by_coordinator
async def get_group(cluster_id: str, group: str, request: Request, broker: BrokerDep):
    check_cluster(cluster_id, broker.settings)
    description = await broker.groups.describe(group)
    return _group_data(_links(request, broker, cluster_id), group_summary(description))


@router.get("/{group}/consumers", summary="Consumers of a group", response_model=None)
@served_by_coordinator
async def list_consumers(cluster_id: str, group: str, request: Request, broker: BrokerDep):
    check_cluster(cluster_id, broker.settings)
    description = await broker.groups.describe(group)
    links = _links(request, broker, cluster_id)
    members = sorted(description.members, key=lambda m: m.member_id)
    data = [_consumer_data(links, group, m) for m in members]
    return list_body("KafkaConsumerList", f"{links.group(group)}/consumers", data)


@router.get(
    "/{group}/consumers/{consumer_id:path}/assignments/{topic}/partitions/{partition}",
    summary="One assigned partition",
    response_model=None,
)
@served_by_coordinator
async def get_assignment(
    cluster_id: str,
    group: str,
    consumer_id: str,
    topic: str,
    partition: int,
    request: Request,
    broker: BrokerDep,
):
    check_cluster(cluster_id, broker.settings)
    member = _member(await broker.groups.describe(group), consumer_id)
    tp = TopicPartition(topic, partition)
    if tp not in member.assignment:
        raise ApiError(404, 404, f"Consumer '{consumer_id}' is not assigned {topic}-{partition}.")
    return _assignment_data(_links(request, broker, cluster_id), group, consumer_id, tp)


@router.get(
    "/{group}/consumers/{consumer_id:path}/assignments",
    summary="Partitions assigned to a consumer",
    response_model=None,
)
@served_by_coordinator
async def list_assignments(
    cluster_id: str, group: str, consumer_id: str, request: Request, broker: BrokerDep
):
    check_cluster(cluster_id, broker.settings)
    member = _member(await broker.groups.describe(group), consumer_id)
    links = _links(request, broker, cluster_id)
    data = [_assignment_data(links, group, consumer_id, tp) for tp in sorted(member.assignment)]
    self_url = f"{links.group(group)}/consumers/{consumer_id}/assignments"
    return list_body("KafkaConsumerAssignmentList", self_url, data)


@router.get("/{group}/consumers/{consumer_id:path}", summary="Consumer", response_model=None)
@served_by_coordinator
async def get_consumer(
    cluster_id: str, group: str, consumer_id: str, request: Request, broker: BrokerDep
):
    check_cluster(cluster_id, broker.settings)
    member = _member(await broker.groups.describe(group), consumer_id)
    return _consumer_data(_links(request, broker, cluster_id), group, member)


@router.get("/{group}/lags", summary="Lag per committed partition", response_model=None)
@served_by_coordinator
async def list_lags(cluster_id: str, group: str, request: Request, broker: BrokerDep):
    check_cluster(cluster_id, broker.settings)
    lags = await group_lags(broker, group)
    # Confluent's order: largest lag first, then topic and partition.
    lags.sort(key=lambda lag: (-lag.lag, lag.partition.topic, lag.partition.partition))
    links = _links(request, broker, cluster_id)
    data = [_lag_data(links, group, lag) for lag in lags]
    return list_body("KafkaConsumerLagList", f"{links.group(group)}/lags", data)


@router.get(
    "/{group}/lags/{topic}/partitions/{partition}",
    summary="Lag of one partition",
    response_model=None,
)
@served_by_coordinator
async def get_lag(
    cluster_id: str, group: str, topic: str, partition: int, request: Request, broker: BrokerDep
):
    check_cluster(cluster_id, broker.settings)
    tp = TopicPartition(topic, partition)
    lags = await group_lags(broker, group, only=tp)
    if not lags:
        raise ApiError(
            404, 404, f"Consumer group '{group}' has no committed offset for {topic}-{partition}."
        )
    return _lag_data(_links(request, broker, cluster_id), group, lags[0])


@router.get("/{group}/lag-summary", summary="Largest and total lag", response_model=None)
@served_by_coordinator
async def get_lag_summary(cluster_id: str, group: str, request: Request, broker: BrokerDep):
    check_cluster(cluster_id, broker.settings)
    lags = await group_lags(broker, group)
    if not lags:
        raise ApiError(
            404, 404, f"Consumer group '{group}' has no committed offsets, so no lag yet."
        )
    return _lag_summary_data(_links(request, broker, cluster_id), group, lags)


@router.get(
    "/{group}/lag-history",
    summary="lakelog extension: the group's lag over time (the console's chart)",
    response_model=None,
)
@served_by_coordinator
async def get_lag_history(
    cluster_id: str,
    group: str,
    request: Request,
    broker: BrokerDep,
    partitions: Annotated[
        bool, Query(description="Include each sample's lag per partition (false: totals only)")
    ] = True,
):
    """Samples taken by the coordinator every `LAKELOG_LAG_SAMPLE_INTERVAL_MS`, oldest first:
    each has the total and largest lag and (unless `partitions=false`) the lag of every
    committed partition; `partial` when some partition's leader did not answer (its last
    known lag is carried over)."""
    check_cluster(cluster_id, broker.settings)
    await broker.groups.describe(group)  # 404 for a group that does not exist
    history: LagHistory = request.app.state.lag_history
    links = _links(request, broker, cluster_id)
    return {
        "kind": "LakelogConsumerLagHistory",
        "metadata": {"self": f"{links.group(group)}/lag-history"},
        "cluster_id": cluster_id,
        "consumer_group_id": group,
        "interval_ms": history.interval_ms,
        "samples": [_sample_data(sample, partitions) for sample in history.samples(group)],
    }


# ---- the group list: every node's groups ---------------------------------------------------


async def _cluster_groups(broker: Broker) -> dict[str, dict]:
    """Group summaries by id: groups with stored offsets, overlaid by what each live node
    reports about the groups it coordinates (members, state). Unreachable nodes are skipped."""
    groups = broker.groups
    stored = {
        group_id: _stored_only(group_id, groups.coordinator_of(group_id))
        for group_id in await groups.stored_groups()
    }
    reports = await asyncio.gather(
        *(_node_groups(broker, node) for node in broker.cluster.live_nodes())
    )
    reported: dict[str, dict] = {}
    for summary in (summary for report in reports for summary in report):
        group_id = summary["group_id"]
        # During a handover two nodes may report a group: the current coordinator wins.
        if group_id not in reported or summary["coordinator"] == groups.coordinator_of(group_id):
            reported[group_id] = summary
    return {**stored, **reported}


async def _node_groups(broker: Broker, node: int) -> list[dict]:
    if node == broker.groups.node_id:
        return await local_group_summaries(broker)
    url = broker.cluster.url(node)
    if url is None:
        return []
    return await broker.peers.coordinated_groups(url, timeout_ms=NODE_LIST_TIMEOUT_MS)


def _stored_only(group_id: str, coordinator: int) -> dict:
    """A group known only by its stored offsets: no node has members for it."""
    return {
        "group_id": group_id,
        "state": GroupState.EMPTY.value,
        "type": CLASSIC,
        "protocol": None,
        "members": 0,
        "coordinator": coordinator,
    }


# ---- shapes --------------------------------------------------------------------------------


def _links(request: Request, broker: Broker, cluster_id: str) -> Links:
    return Links(f"{base_url(request, broker.settings)}/v3/clusters/{cluster_id}", cluster_id)


def _member(description: GroupDescription, consumer_id: str) -> MemberView:
    for member in description.members:
        if member.member_id == consumer_id:
            return member
    raise ApiError(
        404,
        404,
        f"Consumer '{consumer_id}' is not a member of group '{description.group_id}' (it left, "
        f"its session expired, or the id is wrong).",
    )


def v3_state(state: str) -> str:
    """Kafka's state name as Confluent's v3 spells it: "PreparingRebalance" is
    PREPARING_REBALANCE; a consumer group's "Reconciling" is RECONCILING."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", state).upper()


def _group_data(links: Links, summary: dict) -> dict:
    group_id = summary["group_id"]
    self_url = links.group(group_id)
    return {
        "kind": "KafkaConsumerGroup",
        "metadata": {"self": self_url, "resource_name": links.crn(f"consumer-group={group_id}")},
        "cluster_id": links.cluster_id,
        "consumer_group_id": group_id,
        "is_simple": summary["members"] == 0,
        "partition_assignor": summary["protocol"] or "",
        "state": v3_state(summary["state"]),
        "type": summary.get("type", CLASSIC).upper(),  # CLASSIC or CONSUMER (KIP-848)
        "is_mixed_consumer_group": False,
        "coordinator": {"related": f"{links.base}/brokers/{summary['coordinator']}"},
        "consumers": {"related": f"{self_url}/consumers"},
        "lag_summary": {"related": f"{self_url}/lag-summary"},
    }


def _consumer_data(links: Links, group_id: str, member: MemberView) -> dict:
    self_url = f"{links.group(group_id)}/consumers/{member.member_id}"
    crn = links.crn(f"consumer-group={group_id}", f"consumer={member.member_id}")
    return {
        "kind": "KafkaConsumer",
        "metadata": {"self": self_url, "resource_name": crn},
        "cluster_id": links.cluster_id,
        "consumer_group_id": group_id,
        "consumer_id": member.member_id,
        "instance_id": member.group_instance_id,
        "client_id": member.client_id,
        "assignments": {"related": f"{self_url}/assignments"},
    }


def _assignment_data(links: Links, group_id: str, consumer_id: str, tp: TopicPartition) -> dict:
    self_url = (
        f"{links.group(group_id)}/consumers/{consumer_id}/assignments/"
        f"{tp.topic}/partitions/{tp.partition}"
    )
    crn = links.crn(
        f"consumer-group={group_id}",
        f"consumer={consumer_id}",
        f"assignment={tp.topic}",
        f"partition={tp.partition}",
    )
    return {
        "kind": "KafkaConsumerAssignment",
        "metadata": {"self": self_url, "resource_name": crn},
        "cluster_id": links.cluster_id,
        "consumer_group_id": group_id,
        "consumer_id": consumer_id,
        "topic_name": tp.topic,
        "partition_id": tp.partition,
        "partition": {"related": links.partition(tp)},
    }


def _lag_data(links: Links, group_id: str, lag: PartitionLag) -> dict:
    tp, owner = lag.partition, lag.owner
    self_url = f"{links.group(group_id)}/lags/{tp.topic}/partitions/{tp.partition}"
    crn = links.crn(f"topic={tp.topic}", f"partition={tp.partition}", f"lag={group_id}")
    return {
        "kind": "KafkaConsumerLag",
        "metadata": {"self": self_url, "resource_name": crn},
        "cluster_id": links.cluster_id,
        "consumer_group_id": group_id,
        "topic_name": tp.topic,
        "partition_id": tp.partition,
        "current_offset": lag.current_offset,
        "log_end_offset": lag.log_end_offset,
        "lag": lag.lag,
        "consumer_id": owner.member_id if owner else "",
        "instance_id": owner.group_instance_id if owner else None,
        "client_id": owner.client_id if owner else "",
    }


def _lag_summary_data(links: Links, group_id: str, lags: list[PartitionLag]) -> dict:
    """`lags` in topic/partition order: of equal lags the first is the maximum (Confluent)."""
    top = max(lags, key=lambda lag: lag.lag)
    tp, owner = top.partition, top.owner
    consumer_id = owner.member_id if owner else ""
    self_url = f"{links.group(group_id)}/lag-summary"
    return {
        "kind": "KafkaConsumerGroupLagSummary",
        "metadata": {
            "self": self_url,
            "resource_name": links.crn(f"consumer-group={group_id}", "lag-summary"),
        },
        "cluster_id": links.cluster_id,
        "consumer_group_id": group_id,
        "max_lag_consumer_id": consumer_id,
        "max_lag_instance_id": owner.group_instance_id if owner else None,
        "max_lag_client_id": owner.client_id if owner else "",
        "max_lag_topic_name": tp.topic,
        "max_lag_partition_id": tp.partition,
        "max_lag": top.lag,
        "total_lag": sum(lag.lag for lag in lags),
        "max_lag_consumer": {"related": f"{links.group(group_id)}/consumers/{consumer_id}"},
        "max_lag_partition": {"related": links.partition(tp)},
    }


def _sample_data(sample: LagSample, partitions: bool) -> dict:
    data = {
        "time_ms": sample.time_ms,
        "total_lag": sample.total_lag,
        "max_lag": sample.max_lag,
        "partial": sample.partial,
    }
    if partitions:
        data["partitions"] = [
            {"topic_name": tp.topic, "partition_id": tp.partition, "lag": lag}
            for tp, lag in sample.lags
        ]
    return data
