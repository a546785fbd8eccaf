"""Kafka's range, roundrobin and cooperative-sticky assignors, on the pure assign() function."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest

from api.core.groups.assignors import (
    ASSIGNORS,
    Assignment,
    MemberSubscription,
    UnknownAssignor,
    assign,
    needs_follow_up,
)
from storage_layout.records import TopicPartition

EAGER = ("range", "roundrobin")


def tps(*names: str) -> frozenset[TopicPartition]:
    """Partitions written as Kafka's docs write them: "t0p1" is partition 1 of topic t0."""
    parsed = (name.rpartition("p") for name in names)
    return frozenset(TopicPartition(topic, int(partition)) for topic, _, partition in parsed)


def member(
    member_id: str,
    *topics: str,
    owned: frozenset[TopicPartition] = frozenset(),
    instance: str | None = None,
) -> MemberSubscription:
    return MemberSubscription(member_id, frozenset(topics), owned, instance)


def owning(members: Sequence[MemberSubscription], result: Assignment) -> list[MemberSubscription]:
    """The same members, each now owning what `result` gave it (the next rebalance's input)."""
    return [
        MemberSubscription(
            m.member_id, m.topics, result.partitions[m.member_id], m.group_instance_id
        )
        for m in members
    ]


def counts(result: Assignment) -> dict[str, int]:
    return {member_id: len(partitions) for member_id, partitions in result.partitions.items()}


# --- common to every assignor -----------------------------------------------------------------


def test_unknown_assignor_names_the_valid_ones():
    """An unknown name raises UnknownAssignor (a ValueError) listing the three valid names."""
    with pytest.raises(UnknownAssignor) as raised:
        assign("sticky", [member("c0", "t0")], {"t0": 1})
    assert isinstance(raised.value, ValueError)
    assert all(name in str(raised.value) for name in ASSIGNORS)


def test_duplicate_member_ids_are_refused():
    """Two members with one id is a coordinator bug, not something to assign around."""
    with pytest.raises(ValueError, match="unique"):
        assign("range", [member("c0", "t0"), member("c0", "t1")], {"t0": 1, "t1": 1})


@pytest.mark.parametrize("assignor", ASSIGNORS)
def test_more_members_than_partitions_leaves_extras_idle(assignor):
    """Three members on two partitions: each partition goes once, the extra member is listed
    with an empty set."""
    members = [member(f"c{i}", "t0") for i in range(3)]
    result = assign(assignor, members, {"t0": 2})
    assert set(result.partitions) == {"c0", "c1", "c2"}
    assert sorted(counts(result).values()) == [0, 1, 1]
    assert frozenset().union(*result.partitions.values()) == tps("t0p0", "t0p1")


@pytest.mark.parametrize("assignor", ASSIGNORS)
def test_unknown_topics_are_ignored(assignor):
    """A subscribed (or owned) topic missing from the partition counts gives nobody anything,
    and a member subscribed only to it stays idle."""
    members = [
        member("c0", "t0", "gone", owned=tps("gone0p0")),
        member("c1", "gone", owned=tps("gone0p1")),
    ]
    result = assign(assignor, members, {"t0": 2})
    assert result.partitions == {"c0": tps("t0p0", "t0p1"), "c1": frozenset()}
    assert result.revoking == frozenset()


@pytest.mark.parametrize("assignor", ASSIGNORS)
def test_a_topic_goes_only_to_its_subscribers(assignor):
    """With disjoint subscriptions each member gets exactly its own topic."""
    members = [member("c0", "t0"), member("c1", "t1"), member("c2", "t2")]
    result = assign(assignor, members, {"t0": 2, "t1": 3, "t2": 1})
    assert result.partitions == {
        "c0": tps("t0p0", "t0p1"),
        "c1": tps("t1p0", "t1p1", "t1p2"),
        "c2": tps("t2p0"),
    }


@pytest.mark.parametrize("assignor", ASSIGNORS)
def test_input_order_does_not_matter(assignor):
    """Shuffled members and topic order give the same assignment."""
    rng = random.Random(7)
    topics = {"t0": 5, "t1": 3, "t2": 4}
    members = [
        member("c3", "t0", "t1", owned=tps("t0p0", "t1p1")),
        member("c1", "t0", "t2", owned=tps("t0p1", "t0p2", "t0p3")),
        member("c0", "t1", "t2", instance="static-b"),
        member("c2", "t0", "t1", "t2", instance="static-a", owned=tps("t2p0")),
    ]
    expected = assign(assignor, members, topics)
    for _ in range(20):
        rng.shuffle(members)
        shuffled_topics = dict(rng.sample(sorted(topics.items()), len(topics)))
        assert assign(assignor, members, shuffled_topics) == expected


# --- range ----------------------------------------------------------------------------------


def test_range_textbook_example():
    """Kafka's RangeAssignor doc: two members, t0 and t1 with three partitions each."""
    members = [member("C0", "t0", "t1"), member("C1", "t0", "t1")]
    result = assign("range", members, {"t0": 3, "t1": 3})
    assert result.partitions == {
        "C0": tps("t0p0", "t0p1", "t1p0", "t1p1"),
        "C1": tps("t0p2", "t1p2"),
    }


def test_range_first_members_get_the_extra_partitions():
    """Seven partitions over three members: contiguous ranges of 3, 2, 2 in member id order."""
    members = [member("c2", "t0"), member("c0", "t0"), member("c1", "t0")]
    result = assign("range", members, {"t0": 7})
    assert result.partitions == {
        "c0": tps("t0p0", "t0p1", "t0p2"),
        "c1": tps("t0p3", "t0p4"),
        "c2": tps("t0p5", "t0p6"),
    }


def test_range_with_different_subscriptions():
    """Each topic is split over its own subscribers only."""
    members = [member("C0", "t0"), member("C1", "t0", "t1"), member("C2", "t0", "t1", "t2")]
    result = assign("range", members, {"t0": 1, "t1": 2, "t2": 3})
    assert result.partitions == {
        "C0": tps("t0p0"),
        "C1": tps("t1p0"),
        "C2": tps("t1p1", "t2p0", "t2p1", "t2p2"),
    }


def test_range_static_member_keeps_its_range_across_a_restart():
    """A restarted static member comes back with a new member id that sorts elsewhere; it is
    ordered by its instance id, so its range does not change."""
    topics = {"t0": 5}
    before = assign(
        "range", [member("m-b", "t0", instance="i1"), member("m-c", "t0", instance="i2")], topics
    )
    after = assign(
        "range", [member("m-z", "t0", instance="i1"), member("m-c", "t0", instance="i2")], topics
    )
    assert before.partitions["m-b"] == after.partitions["m-z"] == tps("t0p0", "t0p1", "t0p2")
    assert before.partitions["m-c"] == after.partitions["m-c"] == tps("t0p3", "t0p4")


def test_static_members_sort_before_dynamic_ones():
    """Kafka's MemberInfo order: a static member precedes a dynamic one whatever the ids."""
    members = [member("a-dynamic", "t0"), member("z-static", "t0", instance="z")]
    result = assign("range", members, {"t0": 3})
    assert result.partitions["z-static"] == tps("t0p0", "t0p1")


# --- roundrobin -----------------------------------------------------------------------------


def test_roundrobin_textbook_example():
    """Kafka's RoundRobinAssignor doc: two members, t0 and t1 with three partitions each."""
    members = [member("C0", "t0", "t1"), member("C1", "t0", "t1")]
    result = assign("roundrobin", members, {"t0": 3, "t1": 3})
    assert result.partitions == {
        "C0": tps("t0p0", "t0p2", "t1p1"),
        "C1": tps("t0p1", "t1p0", "t1p2"),
    }


def test_roundrobin_skips_members_not_subscribed():
    """Kafka's doc example with different subscriptions: the deal skips non-subscribers and
    carries on from where it stopped."""
    members = [member("C0", "t0"), member("C1", "t0", "t1"), member("C2", "t0", "t1", "t2")]
    result = assign("roundrobin", members, {"t0": 1, "t1": 2, "t2": 3})
    assert result.partitions == {
        "C0": tps("t0p0"),
        "C1": tps("t1p0"),
        "C2": tps("t1p1", "t2p0", "t2p1", "t2p2"),
    }


@pytest.mark.parametrize("assignor", EAGER)
def test_eager_assignors_ignore_owned_and_revoke_nothing(assignor):
    """Range and roundrobin recompute from scratch: what members own changes nothing."""
    topics = {"t0": 4}
    fresh = [member("c0", "t0"), member("c1", "t0")]
    owning_all = [member("c0", "t0"), member("c1", "t0", owned=tps("t0p0", "t0p1", "t0p2"))]
    result = assign(assignor, owning_all, topics)
    assert result == assign(assignor, fresh, topics)
    assert not needs_follow_up(result)


# --- cooperative-sticky ---------------------------------------------------------------------


def test_sticky_first_generation_is_balanced():
    """Nobody owns anything: ten partitions over three members, 4/3/3, nothing revoked."""
    members = [member(f"c{i}", "t0", "t1") for i in range(3)]
    result = assign("cooperative-sticky", members, {"t0": 6, "t1": 4})
    assert sorted(counts(result).values()) == [3, 3, 4]
    assert not needs_follow_up(result)


def test_sticky_join_revokes_the_minimum_then_completes():
    """A third member joins two owning three each: one partition leaves each owner and is
    revoked (nobody gets it this round); the follow-up hands both to the newcomer, 2/2/2."""
    topics = {"t0": 3, "t1": 3}
    a_owned, b_owned = tps("t0p0", "t0p1", "t0p2"), tps("t1p0", "t1p1", "t1p2")
    members = [
        member("a", "t0", "t1", owned=a_owned),
        member("b", "t0", "t1", owned=b_owned),
        member("c", "t0", "t1"),
    ]
    first = assign("cooperative-sticky", members, topics)
    assert needs_follow_up(first)
    assert len(first.revoking) == 2
    assert len(first.revoking & a_owned) == 1 and len(first.revoking & b_owned) == 1
    assert first.partitions["a"] == a_owned - first.revoking
    assert first.partitions["b"] == b_owned - first.revoking
    assert first.partitions["c"] == frozenset()

    second = assign("cooperative-sticky", owning(members, first), topics)
    assert not needs_follow_up(second)
    assert second.partitions["c"] == first.revoking
    assert second.partitions["a"] == first.partitions["a"]
    assert second.partitions["b"] == first.partitions["b"]


def test_sticky_leave_reassigns_at_once():
    """A member leaves: its partitions (owned by nobody now) go to the others this round, and
    the others keep everything they had."""
    topics = {"t0": 6}
    owned = {"a": tps("t0p0", "t0p1"), "b": tps("t0p2", "t0p3")}
    members = [member(m, "t0", owned=partitions) for m, partitions in owned.items()]
    result = assign("cooperative-sticky", members, topics)
    assert not needs_follow_up(result)
    assert result.partitions["a"] > owned["a"] and result.partitions["b"] > owned["b"]
    assert result.partitions["a"] | result.partitions["b"] == tps(*(f"t0p{i}" for i in range(6)))


def test_sticky_new_partitions_are_assigned_at_once():
    """A topic grows from two to four partitions: the new ones are owned by nobody and go
    straight to members, without a follow-up."""
    members = [member("a", "t0", owned=tps("t0p0")), member("b", "t0", owned=tps("t0p1"))]
    result = assign("cooperative-sticky", members, {"t0": 4})
    assert not needs_follow_up(result)
    assert result.partitions["a"] >= tps("t0p0") and result.partitions["b"] >= tps("t0p1")
    assert counts(result) == {"a": 2, "b": 2}


def test_sticky_unsubscribed_topic_is_revoked_before_it_moves():
    """A member that dropped t1 still consumes its t1 partition until it gives it up, so that
    partition is revoked, and only the follow-up hands it to the other subscriber."""
    topics = {"t0": 2, "t1": 1}
    members = [
        member("a", "t0", owned=tps("t0p0", "t1p0")),
        member("b", "t0", "t1", owned=tps("t0p1")),
    ]
    first = assign("cooperative-sticky", members, topics)
    assert first.revoking == tps("t1p0")
    assert first.partitions == {"a": tps("t0p0"), "b": tps("t0p1")}
    second = assign("cooperative-sticky", owning(members, first), topics)
    assert second.partitions == {"a": tps("t0p0"), "b": tps("t0p1", "t1p0")}
    assert not needs_follow_up(second)


def test_sticky_partition_claimed_twice_stays_with_one():
    """b and c both claim t0p0 (one missed a rebalance): it stays with b, the first claimant
    in member order, whatever the input order; it is neither revoked nor given to a."""
    topics = {"t0": 3}
    members = [
        member("a", "t0"),
        member("b", "t0", owned=tps("t0p0")),
        member("c", "t0", owned=tps("t0p0")),
    ]
    for ordered in (members, members[::-1]):
        result = assign("cooperative-sticky", ordered, topics)
        assert result.partitions == {"a": tps("t0p1"), "b": tps("t0p0"), "c": tps("t0p2")}
        assert not needs_follow_up(result)


def test_sticky_balances_around_narrow_subscriptions():
    """The member that can take only t0 gets t0; the one subscribed to both takes t1: 2/2
    rather than 1/3."""
    members = [member("a", "t0"), member("b", "t0", "t1")]
    result = assign("cooperative-sticky", members, {"t0": 2, "t1": 2})
    assert result.partitions == {"a": tps("t0p0", "t0p1"), "b": tps("t1p0", "t1p1")}


def test_sticky_rebalances_through_a_third_member():
    """Overloaded c shares no topic with idle a, so partitions travel c -> b -> a: b hands its
    t0 partitions to a and takes two of c's t1. All four are revoked first (b is idle for a
    round); the follow-up completes 2/2/2."""
    topics = {"t0": 2, "t1": 4}
    c_owned = tps("t1p0", "t1p1", "t1p2", "t1p3")
    members = [
        member("a", "t0"),
        member("b", "t0", "t1", owned=tps("t0p0", "t0p1")),
        member("c", "t1", owned=c_owned),
    ]
    first = assign("cooperative-sticky", members, topics)
    moving_t1 = first.revoking & c_owned
    assert first.revoking == tps("t0p0", "t0p1") | moving_t1 and len(moving_t1) == 2
    assert first.partitions == {"a": frozenset(), "b": frozenset(), "c": c_owned - moving_t1}
    second = assign("cooperative-sticky", owning(members, first), topics)
    assert second.partitions == {
        "a": tps("t0p0", "t0p1"),
        "b": moving_t1,
        "c": c_owned - moving_t1,
    }


# --- random inputs --------------------------------------------------------------------------

TOPIC_NAMES = ("t0", "t1", "t2", "t3")


def random_group(rng: random.Random) -> tuple[list[MemberSubscription], dict[str, int]]:
    """1-6 members over up to four known topics and one unknown, with random subscriptions and
    random (possibly overlapping, stale or unknown) owned partitions."""
    topics = {name: rng.randint(0, 8) for name in TOPIC_NAMES[: rng.randint(1, 4)]}
    names = [*topics, "gone"]
    members = []
    for index in range(rng.randint(1, 6)):
        subscribed = frozenset(name for name in names if rng.random() < 0.6)
        owned = frozenset(
            TopicPartition(name, p) for name in names for p in range(10) if rng.random() < 0.15
        )
        instance = f"i{rng.randint(0, 9)}" if rng.random() < 0.3 else None
        members.append(MemberSubscription(f"m{index}", subscribed, owned, instance))
    return members, topics


def check_invariants(
    members: Sequence[MemberSubscription], topics: Mapping[str, int], result: Assignment
) -> None:
    """Every member listed; each existing subscribed partition given once or revoked; nothing
    else given; only to subscribers."""
    assert set(result.partitions) == {m.member_id for m in members}
    given = Counter(tp for partitions in result.partitions.values() for tp in partitions)
    given.update(result.revoking)
    assert all(times == 1 for times in given.values()), "a partition was given twice"
    subscribed = {m.member_id: m.topics for m in members}
    for member_id, partitions in result.partitions.items():
        assert all(tp.topic in subscribed[member_id] for tp in partitions)
    expected = {
        TopicPartition(topic, p)
        for topic, count in topics.items()
        if any(topic in m.topics for m in members)
        for p in range(count)
    }
    assert set(given) == expected


def check_balanced(members: Sequence[MemberSubscription], result: Assignment) -> None:
    """Kafka's criterion: no member holds two more than a member that could take one of its
    partitions; so members with identical subscriptions differ by at most one."""
    load = counts(result)
    for rich in members:
        for poor in members:
            if load[rich.member_id] >= load[poor.member_id] + 2:
                movable = [
                    tp for tp in result.partitions[rich.member_id] if tp.topic in poor.topics
                ]
                assert not movable, f"{rich.member_id} could give {movable} to {poor.member_id}"
    by_subscription: dict[frozenset[str], list[int]] = {}
    for m in members:
        by_subscription.setdefault(m.topics, []).append(load[m.member_id])
    assert all(max(group) - min(group) <= 1 for group in by_subscription.values())


@pytest.mark.parametrize("assignor", ASSIGNORS)
def test_random_groups_keep_the_invariants(assignor):
    """Three hundred random groups: every invariant of an Assignment holds for each assignor;
    eager ones never revoke."""
    rng = random.Random(20240611)
    for _ in range(300):
        members, topics = random_group(rng)
        result = assign(assignor, members, topics)
        check_invariants(members, topics, result)
        if assignor in EAGER:
            assert not needs_follow_up(result)


def test_random_groups_sticky_follow_up_completes_balanced():
    """Three hundred random groups: after one follow-up nothing is revoked, the group is
    balanced, and members kept every partition the first round let them keep."""
    rng = random.Random(1848)
    for _ in range(300):
        members, topics = random_group(rng)
        first = assign("cooperative-sticky", members, topics)
        second = assign("cooperative-sticky", owning(members, first), topics)
        check_invariants(members, topics, second)
        assert not needs_follow_up(second)
        check_balanced(members, second)
        assert all(second.partitions[m] >= first.partitions[m] for m in first.partitions)


def fewest_moves(owned_counts: Sequence[int], partition_count: int) -> int:
    """Partitions that must leave their owners when all members subscribe to everything: the
    members owning most keep up to the larger share, the others up to the smaller one."""
    share, larger_shares = divmod(partition_count, len(owned_counts))
    ranked = sorted(owned_counts, reverse=True)
    return sum(
        max(0, owned - share - (1 if rank < larger_shares else 0))
        for rank, owned in enumerate(ranked)
    )


def test_random_groups_sticky_revokes_the_minimum_with_identical_subscriptions():
    """Three hundred random groups whose members share one subscription and own disjoint
    partitions: exactly the partitions that must move are revoked, and nothing else moves."""
    rng = random.Random(4242)
    for _ in range(300):
        topics = {"t0": rng.randint(0, 12), "t1": rng.randint(0, 12)}
        everything = [TopicPartition(t, p) for t, count in topics.items() for p in range(count)]
        member_count = rng.randint(1, 6)
        owners = [rng.randrange(member_count + 2) for _ in everything]  # >= member_count: left
        members = [
            member(
                f"m{i}",
                "t0",
                "t1",
                owned=frozenset(tp for tp, o in zip(everything, owners, strict=True) if o == i),
            )
            for i in range(member_count)
        ]
        result = assign("cooperative-sticky", members, topics)
        owned_counts = [len(m.owned) for m in members]
        assert len(result.revoking) == fewest_moves(owned_counts, len(everything))
        for m in members:
            assert result.partitions[m.member_id] >= m.owned - result.revoking
