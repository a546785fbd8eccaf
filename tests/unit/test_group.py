"""The consumer group state machine (api/core/groups/group.py) with a manual clock: joins,
rebalances, generations, sessions, static membership, cooperative follow-ups."""

from __future__ import annotations

import pytest

from api.core.groups.consumer_protocol import decode_assignment, encode_assignment
from api.core.groups.errors import (
    FencedInstanceId,
    IllegalGeneration,
    InconsistentGroupProtocol,
    RebalanceInProgress,
    UnknownMemberId,
)
from api.core.groups.group import Group, GroupState, JoinRequest, Subscription
from storage_layout.records import TopicPartition

PARTITIONS = {"orders": 4, "audit": 1}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(member_id=None, *, instance=None, topics=("orders",), assignors=("range",), **extra):
    values = {
        "member_id": member_id,
        "client_id": "c",
        "group_instance_id": instance,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 30_000,
        "subscription": Subscription(topics=frozenset(topics)),
        "assignors": assignors,
    }
    return JoinRequest(**(values | extra))


def complete(group: Group) -> None:
    assert group.ready_to_complete()
    group.complete_rebalance(PARTITIONS, frozenset(PARTITIONS))


def stable_group(members: int = 1, **kwargs) -> tuple[Group, Clock, list[str]]:
    """A Stable group of `members` native members that all joined and synced."""
    clock = Clock()
    group = Group("g", clock)
    ids = []
    for _ in range(members):
        ids.append(group.join(request(**kwargs)).member_id)
        for member_id in ids[:-1]:
            group.join(request(member_id, **kwargs))
        complete(group)
    for member_id in ids:
        group.sync(member_id, group.generation)
    assert group.state == GroupState.STABLE
    return group, clock, ids


def partitions(group: Group, member_id: str) -> set[TopicPartition]:
    return set(group.members[member_id].assignment)


def test_first_member_goes_through_every_state_to_stable():
    group = Group("g", Clock())
    assert group.state == GroupState.EMPTY
    member = group.join(request())
    assert group.state == GroupState.PREPARING_REBALANCE
    complete(group)
    assert (group.state, group.generation) == (GroupState.COMPLETING_REBALANCE, 1)
    assert group.sync(member.member_id, 1) == frozenset(
        TopicPartition("orders", p) for p in range(4)
    )
    assert group.state == GroupState.STABLE


def test_a_join_waits_for_every_member_to_rejoin_then_splits_partitions():
    group, clock, (first,) = stable_group()
    second = group.join(request()).member_id
    assert not group.ready_to_complete()  # the first member has not rejoined yet
    with pytest.raises(RebalanceInProgress):
        group.heartbeat(first, 1)
    group.join(request(first))
    complete(group)
    assert group.generation == 2
    assert partitions(group, first) | partitions(group, second) == {
        TopicPartition("orders", p) for p in range(4)
    }
    assert len(partitions(group, first)) == len(partitions(group, second)) == 2


def test_members_that_miss_the_rebalance_timeout_are_removed():
    group, clock, (first,) = stable_group()
    second = group.join(request()).member_id
    clock.now += 29
    assert not group.ready_to_complete()
    clock.now += 2
    complete(group)
    assert list(group.members) == [second]
    with pytest.raises(UnknownMemberId):
        group.heartbeat(first, group.generation)


def test_session_expiry_removes_a_silent_member_and_rebalances():
    group, clock, (first, second) = stable_group(2)
    clock.now += 6
    group.heartbeat(first, group.generation)
    clock.now += 6  # second silent for 12 s > 10 s session
    assert group.expire() == [second]
    assert group.state == GroupState.PREPARING_REBALANCE
    group.join(request(first))
    complete(group)
    assert len(partitions(group, first)) == 4


def test_a_member_waiting_in_a_join_outlives_its_session_until_the_rebalance_completes():
    """A rebalance waits for a silent member with a long session; the member that joined and
    waits is not expired meanwhile (it was, and got UNKNOWN_MEMBER_ID instead of its
    assignment), and its session starts again when the rebalance completes."""
    group, clock, (silent,) = stable_group(session_timeout_ms=60_000)
    waiting = group.join(request(session_timeout_ms=10_000)).member_id
    clock.now += 15
    assert group.expire() == [] and not group.ready_to_complete()
    clock.now += 16  # past the 30 s rebalance timeout
    complete(group)
    assert list(group.members) == [waiting] and len(partitions(group, waiting)) == 4
    assert group.expire() == []
    clock.now += 11
    assert group.expire() == [waiting]  # silent after the rebalance: its session applies


def test_old_generations_and_unknown_members_are_fenced():
    group, _, (first,) = stable_group()
    with pytest.raises(IllegalGeneration):
        group.heartbeat(first, group.generation - 1)
    with pytest.raises(IllegalGeneration):
        group.sync(first, group.generation + 1)
    with pytest.raises(UnknownMemberId):
        group.heartbeat("nobody", group.generation)


def test_static_member_restart_within_the_session_causes_no_rebalance():
    group, _, (old,) = stable_group(instance="host-1")
    generation, assignment = group.generation, partitions(group, old)
    new = group.join(request(instance="host-1")).member_id
    assert new != old
    assert group.state == GroupState.STABLE
    assert group.generation == generation
    assert partitions(group, new) == assignment
    with pytest.raises(FencedInstanceId):
        group.heartbeat(old, generation)  # the replaced (duplicate) instance is fenced


def test_static_member_with_a_new_subscription_rebalances():
    group, _, _ = stable_group(instance="host-1")
    group.join(request(instance="host-1", topics=("orders", "audit")))
    assert group.state == GroupState.PREPARING_REBALANCE


def test_more_members_than_partitions_leaves_the_extra_ones_idle():
    group, _, ids = stable_group(3, topics=("audit",))
    sizes = sorted(len(partitions(group, member_id)) for member_id in ids)
    assert sizes == [0, 0, 1]


def test_server_driven_members_rebalance_without_waiting():
    group = Group("g", Clock())
    first = group.join(request(server_driven=True)).member_id
    complete(group)
    assert group.state == GroupState.STABLE  # nobody has to sync
    group.join(request(server_driven=True))
    assert group.ready_to_complete()  # `first` counts as rejoined at once
    complete(group)
    assert len(partitions(group, first)) == 2


def test_cooperative_rebalance_revokes_first_and_hands_over_in_a_follow_up():
    kwargs = {"assignors": ("cooperative-sticky",), "server_driven": True}
    group = Group("g", Clock())
    first = group.join(request(**kwargs)).member_id
    complete(group)
    before = partitions(group, first)
    second = group.join(request(**kwargs)).member_id
    complete(group)
    # Nothing is owned twice: what moves is revoked now, handed over in the follow-up.
    assert partitions(group, second) == set()
    assert partitions(group, first) < before
    assert group.state == GroupState.PREPARING_REBALANCE  # the follow-up started
    complete(group)
    assert len(partitions(group, first)) == len(partitions(group, second)) == 2


def test_a_member_without_a_common_assignor_is_refused():
    group, _, _ = stable_group(assignors=("range",))
    with pytest.raises(InconsistentGroupProtocol):
        group.join(request(assignors=("roundrobin",)))


def test_leaving_rebalances_and_the_last_one_empties_the_group():
    group, _, (first, second) = stable_group(2)
    group.leave(first)
    assert group.state == GroupState.PREPARING_REBALANCE
    group.leave(second)
    assert group.state == GroupState.EMPTY
    assert group.members == {}


# ---- Kafka's classic protocol: the leader member assigns ------------------------------------


def kafka_request(member_id=None, metadata=b"m", **extra):
    return request(
        member_id,
        protocol_metadata=(("range", metadata),),
        protocol_type="consumer",
        **extra,
    )


def test_a_client_assigned_group_waits_for_the_leaders_assignments():
    group = Group("g", Clock(), decode_assignment=decode_assignment)
    first = group.join(kafka_request(metadata=b"first")).member_id
    second = group.join(kafka_request(metadata=b"second")).member_id
    group.join(kafka_request(first, metadata=b"first"))
    complete(group)
    assert group.state == GroupState.COMPLETING_REBALANCE
    leader = group.leader_id
    follower = second if leader == first else first
    assert {v.member_id: v.metadata for v in group.views()} == {first: b"first", second: b"second"}
    assert group.sync_client_assigned(follower, group.generation, None) is None  # not yet

    mine = encode_assignment((TopicPartition("orders", 0), TopicPartition("orders", 1)))
    theirs = encode_assignment((TopicPartition("orders", 2),))
    got = group.sync_client_assigned(leader, group.generation, {leader: mine, follower: theirs})

    assert got == mine and group.state == GroupState.STABLE
    assert group.sync_client_assigned(follower, group.generation, None) == theirs
    assert group.owners() == {
        TopicPartition("orders", 0): leader,
        TopicPartition("orders", 1): leader,
        TopicPartition("orders", 2): follower,
    }


def test_a_client_leader_rejoining_a_stable_group_starts_a_rebalance():
    group = Group("g", Clock(), decode_assignment=decode_assignment)
    member = group.join(kafka_request()).member_id
    complete(group)
    group.sync_client_assigned(member, group.generation, {member: b""})
    assert group.state == GroupState.STABLE
    group.join(kafka_request(member))  # it saw new metadata: its assignment must be redone
    assert group.state == GroupState.PREPARING_REBALANCE


def test_kafka_clients_and_http_members_cannot_share_a_group():
    group = Group("g", Clock())
    group.join(kafka_request())
    with pytest.raises(InconsistentGroupProtocol):
        group.join(request())
