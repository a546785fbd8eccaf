"""Share group membership (ShareGroupHeartbeat's rules) and share sessions (ShareFetch's),
with the group configs in a real `_meta/group_configs` table."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from api.core.group_configs import GroupConfigs
from api.core.groups.errors import (
    FencedMemberEpoch,
    GroupNotFound,
    NotCoordinator,
    UnknownMemberId,
)
from api.core.shares.membership import ShareHeartbeat, ShareMembership
from api.kafka.share_sessions import ShareSessionError, ShareSessions
from storage_layout.meta.group_configs import GroupConfigStore
from storage_layout.records import TopicPartition


async def _blocking(function, *args, **kwargs):
    return function(*args, **kwargs)


class Clock:
    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def world(tmp_path):
    counts = {"orders": 2}
    clock = Clock()

    async def partition_counts() -> dict[str, int]:
        return dict(counts)

    members = ShareMembership(
        node_id=0,
        coordinator_of=lambda group: 1 if group == "elsewhere" else 0,
        other_type=lambda group: group == "classic",
        partition_counts=partition_counts,
        configs=GroupConfigs(GroupConfigStore(str(tmp_path)), _blocking),
        clock_ms=clock,
    )
    return members, counts, clock


def beat(member: str, epoch: int, topics=None) -> ShareHeartbeat:
    return ShareHeartbeat(member, epoch, topic_names=topics)


def run(coroutine):
    return asyncio.run(coroutine)


def test_partitions_are_spread_over_members_and_shared_when_members_outnumber_them(world):
    members, counts, _ = world
    orders = [TopicPartition("orders", p) for p in range(3)]
    first = run(members.heartbeat("g", beat("a", 0, ("orders", "missing"))))
    assert first.assignment == {orders[0], orders[1]}  # alone: every partition that exists
    second = run(members.heartbeat("g", beat("b", 0, ("orders",))))
    assert second.assignment == {orders[1]}
    moved = run(members.heartbeat("g", beat("a", first.member_epoch)))
    assert moved.assignment == {orders[0]} and moved.member_epoch > first.member_epoch
    same = run(members.heartbeat("g", beat("a", moved.member_epoch)))
    assert same.assignment is None and same.member_epoch == moved.member_epoch
    third = run(members.heartbeat("g", beat("c", 0, ("orders",))))
    assert third.assignment == {orders[0]}  # 3 members, 2 partitions: c shares partition 0
    counts["orders"] = 3
    grown = run(members.heartbeat("g", beat("c", third.member_epoch)))
    assert grown.assignment == {orders[2]}
    assert grown.heartbeat_interval_ms == 5000


def test_wrong_epochs_unknown_members_and_foreign_groups_are_refused(world):
    members, _, _ = world
    joined = run(members.heartbeat("g", beat("a", 0, ("orders",))))
    with pytest.raises(FencedMemberEpoch):
        run(members.heartbeat("g", beat("a", joined.member_epoch + 5)))
    with pytest.raises(UnknownMemberId):
        run(members.heartbeat("g", beat("nobody", 3)))
    with pytest.raises(NotCoordinator):
        run(members.heartbeat("elsewhere", beat("a", 0, ("orders",))))
    with pytest.raises(GroupNotFound, match="is not a share group"):
        run(members.heartbeat("classic", beat("a", 0, ("orders",))))


def test_leaving_and_expiring_remove_members(world):
    members, _, clock = world
    run(members.heartbeat("g", beat("a", 0, ("orders",))))
    joined = run(members.heartbeat("g", beat("b", 0, ("orders",))))
    run(members.heartbeat("g", beat("a", -1)))
    assert set(members.describe("g").members) == {"b"}
    clock.now_ms = 45_001
    assert run(members.expire()) == [("g", "b")]
    assert members.local_groups() == []
    with pytest.raises(UnknownMemberId):
        run(members.heartbeat("g", beat("b", joined.member_epoch)))


def test_share_sessions_count_epochs_and_close():
    sessions = ShareSessions()
    key = ("g", "m")
    opened = sessions.plan(key, 0, [("t", 0)])
    assert list(opened.session.partitions) == [("t", 0)]
    assert list(sessions.plan(key, 1, [("t", 1)], [("t", 0)]).session.partitions) == [("t", 1)]
    with pytest.raises(ShareSessionError) as wrong:
        sessions.plan(key, 1, [])
    assert wrong.value.code == ErrorCode.invalid_share_session_epoch
    assert sessions.plan(key, -1, []).closing
    with pytest.raises(ShareSessionError) as gone:
        sessions.plan(key, 3, [])
    assert gone.value.code == ErrorCode.share_session_not_found


def test_a_partition_both_added_and_forgotten_is_forgotten_as_in_kafka():
    sessions = ShareSessions()
    key = ("g", "m")
    sessions.plan(key, 0, [("t", 0), ("t", 1)])
    after = sessions.plan(key, 1, [("t", 1)], [("t", 1)])
    assert list(after.session.partitions) == [("t", 0)]
