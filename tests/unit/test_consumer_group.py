"""KIP-848 consumer groups (api/core/groups/consumer_group.py): epochs, reconciliation that
never lets two members hold one partition, static members, expiry and refusals."""

from __future__ import annotations

import pytest

from api.core.groups.assignors import assign_target
from api.core.groups.consumer_group import (
    ClassicJoin,
    ConsumerGroup,
    ConsumerGroupState,
    ConsumerMember,
    Heartbeat,
    MemberState,
)
from api.core.groups.errors import (
    FencedInstanceId,
    FencedMemberEpoch,
    IllegalGeneration,
    InvalidGroupRequest,
    InvalidRegularExpression,
    RebalanceInProgress,
    StaleMemberEpoch,
    UnknownMemberId,
    UnreleasedInstanceId,
    UnsupportedAssignor,
)
from storage_layout.records import TopicPartition

TOPICS = {"orders": 6, "__consumer_offsets": 50, "payments": 2}


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def group(clock):
    return ConsumerGroup("g", clock, session_timeout_ms=45_000)


def join(group, member_id, *, topics=("orders",), instance_id=None, regex=None, assignor=None):
    beat = Heartbeat(
        member_id,
        0,
        instance_id=instance_id,
        rebalance_timeout_ms=30_000,
        topic_names=topics,
        topic_regex=regex,
        assignor=assignor,
        owned=frozenset(),
    )
    return group.heartbeat(beat, TOPICS)


def beat(group, answer, owned=None):
    """The member's next heartbeat, owning what it was last given (or `owned`)."""
    held = owned if owned is not None else group.members[answer.member_id].assigned
    return group.heartbeat(Heartbeat(answer.member_id, answer.member_epoch, owned=held), TOPICS)


def settle(group, answers, rounds=6):
    """Heartbeat every member in turn, each owning what it holds, until nothing moves."""
    for _ in range(rounds):
        for member_id in list(answers):
            member = group.members[member_id]
            answers[member_id] = group.heartbeat(
                Heartbeat(member_id, member.epoch, owned=member.assigned), TOPICS
            )
            check_exclusive(group)
    return answers


def check_exclusive(group):
    held = [tp for m in group.members.values() for tp in m.holds()]
    assert len(held) == len(set(held)), "a partition is held by two members"


def test_a_first_member_gets_every_partition_at_the_group_epoch(group):
    answer = join(group, "a")
    assert answer.member_epoch == group.epoch == group.assignment_epoch == 1
    assert answer.assignment == {TopicPartition("orders", p) for p in range(6)}
    assert group.state == ConsumerGroupState.STABLE


def test_a_second_member_receives_partitions_only_after_the_first_revokes_them(group):
    a = join(group, "a")
    b = join(group, "b")
    assert b.assignment == frozenset()  # held by a: unreleased
    assert group.members["b"].state == MemberState.UNRELEASED_PARTITIONS
    assert group.state == ConsumerGroupState.RECONCILING
    a2 = beat(group, a)
    assert len(a2.assignment) == 3 and a2.member_epoch == a.member_epoch  # revoke first
    a3 = beat(group, a2, owned=a2.assignment)
    assert a3.member_epoch == group.assignment_epoch
    b2 = beat(group, b)
    assert len(b2.assignment) == 3 and not b2.assignment & group.members["a"].assigned
    assert group.state == ConsumerGroupState.STABLE


def test_many_members_joining_and_leaving_never_share_a_partition(group):
    answers = {m: join(group, m) for m in ("a", "b", "c", "d")}
    settle(group, answers)
    sizes = sorted(len(group.members[m].assigned) for m in answers)
    assert sizes == [1, 1, 2, 2] and group.state == ConsumerGroupState.STABLE
    answers.pop("c")
    assert group.leave("c", -1, None).member_epoch == -1
    settle(group, answers)
    assert sorted(len(group.members[m].assigned) for m in answers) == [2, 2, 2]


def test_an_old_epoch_is_fenced_unless_it_is_the_previous_one_owning_less(group):
    a = join(group, "a")
    b = join(group, "b")
    settle(group, {"a": a, "b": b})
    member = group.members["a"]
    with pytest.raises(FencedMemberEpoch):
        group.heartbeat(Heartbeat("a", member.epoch + 1, owned=frozenset()), TOPICS)
    previous = Heartbeat("a", member.previous_epoch, owned=member.assigned)
    if member.previous_epoch != member.epoch:
        group.heartbeat(previous, TOPICS)  # its answer was lost: accepted
    with pytest.raises(UnknownMemberId):
        group.heartbeat(Heartbeat("zz", 3, owned=frozenset()), TOPICS)


def test_a_static_member_away_keeps_its_partitions_and_comes_back_without_a_rebalance(group):
    answers = {"a": join(group, "a", instance_id="i1"), "b": join(group, "b")}
    settle(group, answers)
    held, epoch = group.members["a"].assigned, group.epoch
    assert group.leave("a", -2, "i1").member_epoch == -2
    assert group.state == ConsumerGroupState.RECONCILING  # as Kafka shows a member away
    join(group, "c", instance_id="i2", topics=("payments",))
    with pytest.raises(UnreleasedInstanceId):
        join(group, "d", instance_id="i2")  # c holds it and has not left
    back = join(group, "a2", instance_id="i1")
    assert back.assignment == held and group.epoch == epoch + 1  # c's join only
    assert "a" not in group.members
    with pytest.raises(FencedInstanceId):
        group.heartbeat(Heartbeat("a", 1, instance_id="i1", owned=frozenset()), TOPICS)


def test_sessions_and_revocation_deadlines_expire(group, clock):
    a = join(group, "a")
    join(group, "b")
    beat(group, a)  # a must revoke three partitions now
    clock.now_s += 31  # past a's rebalance timeout (30 s) without revoking
    assert group.expire() and "a" not in group.members
    clock.now_s += 46
    assert group.expire() and group.state == ConsumerGroupState.EMPTY


def test_regex_subscriptions_match_topics_but_never_internal_ones(group):
    answer = join(group, "a", topics=None, regex=".*")
    topics = {tp.topic for tp in answer.assignment}
    assert topics == {"orders", "payments"}
    grown = dict(TOPICS, orders=8)
    assert group.refresh(grown)
    assert not group.refresh(grown)


def test_refusals_name_what_to_fix(group):
    with pytest.raises(UnsupportedAssignor, match="uniform, range"):
        join(group, "a", assignor="sticky")
    with pytest.raises(InvalidRegularExpression):
        join(group, "a", topics=None, regex="(")
    with pytest.raises(InvalidGroupRequest, match="SubscribedTopicNames"):
        group.heartbeat(Heartbeat("a", 0, rebalance_timeout_ms=1), TOPICS)
    with pytest.raises(InvalidGroupRequest, match="MemberEpoch"):
        group.heartbeat(Heartbeat("a", -3), TOPICS)
    with pytest.raises(InvalidGroupRequest, match="InstanceId"):
        group.heartbeat(Heartbeat("a", -2), TOPICS)


def test_commits_must_carry_the_members_current_epoch(group):
    a = join(group, "a")
    group.check_member_epoch("a", a.member_epoch)
    with pytest.raises(StaleMemberEpoch):
        group.check_member_epoch("a", a.member_epoch - 1)
    with pytest.raises(UnknownMemberId):
        group.check_member_epoch("b", 1)


def test_a_commit_with_an_older_epoch_counts_for_partitions_held_since(group):
    """KIP-1251: the member moved on by a heartbeat answered after its commit was sent."""
    a = join(group, "a", topics=("payments",))
    first_epoch = a.member_epoch
    join(group, "b", topics=("orders",))
    a2 = beat(group, a)  # a new group epoch: a keeps payments, gains nothing
    assert a2.member_epoch > first_epoch
    payments = [TopicPartition("payments", 0), TopicPartition("payments", 1)]
    group.check_member_epoch("a", first_epoch, payments)
    group.members["a"].assigned |= {TopicPartition("orders", 0)}  # as if just given
    group.members["a"].assigned_at[TopicPartition("orders", 0)] = a2.member_epoch
    with pytest.raises(StaleMemberEpoch):
        group.check_member_epoch("a", first_epoch, [*payments, TopicPartition("orders", 0)])
    with pytest.raises(StaleMemberEpoch):
        group.check_member_epoch("a", first_epoch)  # a fetch names no partitions


def test_the_group_uses_the_assignor_most_members_ask_for(group):
    join(group, "a", assignor="range")
    join(group, "b", assignor="range")
    join(group, "c")
    assert group.assignor() == "range"


def test_server_assignors_are_sticky_or_ranged():
    from api.core.groups.assignors import MemberSubscription

    members = [
        MemberSubscription("a", frozenset({"t"}), frozenset({TopicPartition("t", 5)})),
        MemberSubscription("b", frozenset({"t"})),
    ]
    uniform = assign_target("uniform", members, {"t": 6})
    assert TopicPartition("t", 5) in uniform["a"] and len(uniform["b"]) == 3
    ranged = assign_target("range", members, {"t": 6})
    assert ranged["a"] == {TopicPartition("t", p) for p in range(3)}


def test_classic_members_adopted_at_their_generation_reconcile_by_rejoining(group, clock):
    orders = frozenset(TopicPartition("orders", p) for p in range(6))
    classic = ConsumerMember(
        "old",
        "c",
        "",
        None,
        None,
        30_000,
        clock(),
        frozenset({"orders"}),
        epoch=7,
        assigned=orders,
        classic_session_timeout_ms=10_000,
        classic_protocol="range",
    )
    group.epoch = group.assignment_epoch = 7
    group.adopt([classic])
    group.classic_heartbeat("old", 7)  # settled: nothing to do
    new = join(group, "new")  # a consumer protocol member: a new target
    assert new.assignment == frozenset()  # everything is still the classic member's
    with pytest.raises(RebalanceInProgress):
        group.classic_heartbeat("old", 7)
    # an eager member gave everything up before joining again: it owns nothing
    rejoin = ClassicJoin(
        "old", "c", None, 10_000, 30_000, frozenset({"orders"}), frozenset(), (("range", b""),)
    )
    member = group.classic_join(rejoin, TOPICS)
    assert len(member.assigned) == 3 and member.epoch == group.assignment_epoch
    with pytest.raises(IllegalGeneration):
        group.classic_member("old", 7)
    assert len(beat(group, new).assignment) == 3
    check_exclusive(group)
    clock.now_s += 11  # the classic member's own session timeout
    assert group.expire() and set(group.members) == {"new"}
