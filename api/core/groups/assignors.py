"""Partition assignors of a consumer group: pure, no I/O.

The server computes assignments (KIP-848 style): when a rebalance completes, the group coordinator
passes the members (subscriptions already resolved from patterns, and what each owns now) with the
partition count of every topic, and gets back the partitions each member may consume.

- `range` and `roundrobin` are eager, as in Kafka: every member gives up all its partitions at a
  rebalance, so they ignore `owned` and never revoke.
- `cooperative-sticky` (Kafka's CooperativeStickyAssignor) keeps partitions with their owners as
  far as balance allows, and moves a partition in two rebalances: this one takes it from its owner
  (`Assignment.revoking`), a follow-up gives it to its new owner, so no two members ever consume
  it at once.

Members are ordered as Kafka's `MemberInfo` orders them: static members (group_instance_id set)
first, by instance id; then dynamic members, by member id. A restarted static member gets a new
member id but keeps its place, hence its range.

Topics missing from `partitions_per_topic` (deleted or unknown) are ignored, as are owned
partitions beyond a topic's count. Results do not depend on the order of the inputs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from storage_layout.records import TopicPartition

ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")
# KIP-848's server-side assignors (group.remote.assignor); the first is the default.
SERVER_ASSIGNORS = ("uniform", "range")

# member_id -> partitions: the working form while an assignor decides, frozen into an Assignment.
_Held = dict[str, set[TopicPartition]]


class UnknownAssignor(ValueError):
    """The group asked for an assignor this server does not implement."""

    def __init__(self, assignor: str, known: Sequence[str] = ASSIGNORS) -> None:
        super().__init__(
            f"Unknown partition assignor '{assignor}'; valid assignors: {', '.join(known)}."
        )
        self.assignor = assignor


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """One member at a rebalance: the topics it subscribes to and the partitions it owns now.

    `owned` is what the member held in the previous generation; only cooperative-sticky reads it.
    `group_instance_id` is set for static members and replaces the member id as the sort key.
    """

    member_id: str
    topics: frozenset[str]
    owned: frozenset[TopicPartition] = frozenset()
    group_instance_id: str | None = None

    @property
    def sort_key(self) -> tuple[int, str, str]:
        """Kafka's MemberInfo order: static members first by instance id, then dynamic ones by
        member id. The member id breaks ties between duplicate instance ids."""
        if self.group_instance_id is not None:
            return (0, self.group_instance_id, self.member_id)
        return (1, self.member_id, "")


@dataclass(frozen=True, slots=True)
class Assignment:
    """The outcome of one rebalance.

    Invariants: every member is a key of `partitions` (possibly with an empty set); a partition
    is in at most one member's set and never both in a set and in `revoking`; a member only gets
    partitions of topics it subscribes to.

    Attributes:
        partitions: member_id -> the partitions it may consume from now on.
        revoking: cooperative only: partitions taken from their owner this round, to be handed
            to their new owner by a follow-up rebalance. Always empty for eager assignors.
    """

    partitions: dict[str, frozenset[TopicPartition]]
    revoking: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class _Move:
    partition: TopicPartition
    donor: str
    receiver: str


@dataclass(frozen=True, slots=True)
class _Path:
    """Moves handing partitions along members: the first donor loses one, the last receiver
    gains one, members in between keep their count. `revoked_count` moves take a partition
    from the member that owned it."""

    revoked_count: int
    moves: tuple[_Move, ...]

    def then(self, revoked_count: int, move: _Move) -> _Path:
        return _Path(self.revoked_count + revoked_count, (*self.moves, move))


def assign(
    assignor: str,
    members: Sequence[MemberSubscription],
    partitions_per_topic: Mapping[str, int],
) -> Assignment:
    """Assign the partitions of the subscribed topics to the members of one group.

    Args:
        assignor: one of `ASSIGNORS`.
        members: the group's members after the rebalance, in any order; member ids are unique.
        partitions_per_topic: topic -> partition count; topics not in it are ignored.

    Returns:
        An Assignment naming every member. Each partition of a subscribed topic goes to exactly
        one subscriber, or (cooperative-sticky only) to `revoking` when it changes owner.

    Raises:
        UnknownAssignor: `assignor` is not one of `ASSIGNORS`.
        ValueError: duplicate member ids or a negative partition count.
    """
    if assignor not in ASSIGNORS:
        raise UnknownAssignor(assignor)
    ordered = _ordered_members(members)
    _check_partition_counts(partitions_per_topic)
    if assignor == "cooperative-sticky":
        return _assign_cooperative_sticky(ordered, partitions_per_topic)
    eager = _assign_range if assignor == "range" else _assign_roundrobin
    return _frozen(eager(ordered, partitions_per_topic), revoking=())


def assign_target(
    assignor: str,
    members: Sequence[MemberSubscription],
    partitions_per_topic: Mapping[str, int],
) -> dict[str, frozenset[TopicPartition]]:
    """The target assignment of a KIP-848 consumer group (its server-side assignors).

    `uniform` is sticky: each member's `owned` is its previous target, kept as far as balance
    allows. `range` splits each topic in contiguous ranges over its subscribers, so members
    subscribed to co-partitioned topics get the same partition numbers of each. Neither
    revokes: the group's reconciliation takes partitions away before giving them to others.

    Raises:
        UnknownAssignor: `assignor` is not one of `SERVER_ASSIGNORS`.
    """
    if assignor not in SERVER_ASSIGNORS:
        raise UnknownAssignor(assignor, SERVER_ASSIGNORS)
    ordered = _ordered_members(members)
    _check_partition_counts(partitions_per_topic)
    if assignor == "range":
        held = _assign_range(ordered, partitions_per_topic)
    else:
        held = _sticky(ordered, partitions_per_topic, _claims(ordered, partitions_per_topic))
    return {member_id: frozenset(tps) for member_id, tps in held.items()}


def needs_follow_up(assignment: Assignment) -> bool:
    """True when partitions are being revoked: the coordinator must rebalance again so that
    their new owners get them."""
    return bool(assignment.revoking)


def _ordered_members(members: Sequence[MemberSubscription]) -> tuple[MemberSubscription, ...]:
    ordered = tuple(sorted(members, key=lambda member: member.sort_key))
    member_ids = [member.member_id for member in ordered]
    if len(set(member_ids)) != len(member_ids):
        raise ValueError(f"Member ids must be unique within a group (got {member_ids}).")
    return ordered


def _check_partition_counts(partitions_per_topic: Mapping[str, int]) -> None:
    negative = {topic: count for topic, count in partitions_per_topic.items() if count < 0}
    if negative:
        raise ValueError(f"Partition counts must be >= 0 (got {negative}).")


def _topic_partitions(topic: str, partitions_per_topic: Mapping[str, int]) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(partitions_per_topic.get(topic, 0))]


def _subscribers(members: Sequence[MemberSubscription], topic: str) -> list[MemberSubscription]:
    return [member for member in members if topic in member.topics]


def _subscribed_partitions(
    members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> list[TopicPartition]:
    """Every partition of a known topic with at least one subscriber, sorted."""
    topics = sorted(t for t in partitions_per_topic if _subscribers(members, t))
    return [tp for topic in topics for tp in _topic_partitions(topic, partitions_per_topic)]


def _empty(members: Iterable[MemberSubscription]) -> _Held:
    return {member.member_id: set() for member in members}


def _frozen(held: _Held, revoking: Iterable[TopicPartition]) -> Assignment:
    partitions = {member_id: frozenset(tps) for member_id, tps in held.items()}
    return Assignment(partitions, frozenset(revoking))


def _assign_range(
    members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> _Held:
    """Kafka's RangeAssignor: each topic on its own, split in contiguous ranges over its
    subscribers in member order."""
    held = _empty(members)
    for topic in sorted(partitions_per_topic):
        subscribers = _subscribers(members, topic)
        ranges = _ranges(partitions_per_topic[topic], len(subscribers))
        for member, partitions in zip(subscribers, ranges, strict=True):
            held[member.member_id].update(TopicPartition(topic, p) for p in partitions)
    return held


def _ranges(partition_count: int, member_count: int) -> list[range]:
    """`member_count` contiguous ranges over the partitions; the first (count % members) ones
    are one longer."""
    per_member, extra = divmod(partition_count, member_count) if member_count else (0, 0)
    ranges, start = [], 0
    for index in range(member_count):
        length = per_member + (1 if index < extra else 0)
        ranges.append(range(start, start + length))
        start += length
    return ranges


def _assign_roundrobin(
    members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> _Held:
    """Kafka's RoundRobinAssignor: all subscribed partitions sorted by (topic, partition), dealt
    to the members in order, skipping a member not subscribed to the partition's topic."""
    held = _empty(members)
    # Kafka's CircularIterator: the deal goes on from the last member served, across topics.
    position = 0
    for tp in _subscribed_partitions(members, partitions_per_topic):
        # Ends within len(members) steps: the topic has a subscriber.
        while tp.topic not in members[position % len(members)].topics:
            position += 1
        held[members[position % len(members)].member_id].add(tp)
        position += 1
    return held


def _assign_cooperative_sticky(
    members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> Assignment:
    """Kafka's CooperativeStickyAssignor: keep, balance, then revoke what changes owner.

    1. Each valid owned partition stays with its owner (one owner if several claim it).
    2. Partitions owned by nobody go to the least loaded subscriber.
    3. Partitions are handed along, directly or through other members, from a member to one
       holding at least two fewer, until no such path exists; each path revokes the fewest
       partitions it can (handing on a partition the giver did not own revokes nothing).
    4. A partition whose final holder is not its current owner is revoked, not handed over.
    """
    claims = _claims(members, partitions_per_topic)
    return _revoke_changing_owner(_sticky(members, partitions_per_topic, claims), claims)


def _sticky(
    members: Sequence[MemberSubscription],
    partitions_per_topic: Mapping[str, int],
    claims: Mapping[TopicPartition, tuple[str, ...]],
) -> _Held:
    """Steps 1 to 3 of the cooperative-sticky assignor: keep, place the unowned, balance."""
    kept = _kept_owners(members, claims)
    held = _empty(members)
    for tp, member_id in kept.items():
        held[member_id].add(tp)
    unowned = [tp for tp in _subscribed_partitions(members, partitions_per_topic) if tp not in kept]
    _place_unowned(members, held, unowned)
    _balance(members, held, kept)
    return held


def _claims(
    members: Sequence[MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> dict[TopicPartition, tuple[str, ...]]:
    """partition -> the members that say they own it, in member order (usually one).

    Claims on topics a member no longer subscribes to count: the member still consumes the
    partition until it is revoked. Claims on unknown topics or partitions do not.
    """
    claims: dict[TopicPartition, list[str]] = {}
    for member in members:
        for tp in sorted(member.owned):
            if 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0):
                claims.setdefault(tp, []).append(member.member_id)
    return {tp: tuple(member_ids) for tp, member_ids in claims.items()}


def _kept_owners(
    members: Sequence[MemberSubscription], claims: Mapping[TopicPartition, tuple[str, ...]]
) -> dict[TopicPartition, str]:
    """partition -> the claimant that keeps it: the first subscribed one in member order.

    Two claims on one partition mean a member missed a rebalance; keeping it with one of them
    (rather than neither) moves nothing that does not have to move.
    """
    topics_of = {member.member_id: member.topics for member in members}
    kept = {}
    for tp, claimants in claims.items():
        subscribed = [member_id for member_id in claimants if tp.topic in topics_of[member_id]]
        if subscribed:
            kept[tp] = subscribed[0]
    return kept


def _place_unowned(
    members: Sequence[MemberSubscription], held: _Held, unowned: Sequence[TopicPartition]
) -> None:
    """Give each unowned partition to its least loaded subscriber (first in member order on a
    tie). Partitions with the fewest subscribers go first, as in Kafka, so that the partitions
    many members could take fill in around them."""
    subscribers = {tp.topic: _subscribers(members, tp.topic) for tp in unowned}
    for tp in sorted(unowned, key=lambda tp: (len(subscribers[tp.topic]), tp)):
        # min() keeps the first of equals, and subscribers are in member order.
        receiver = min(subscribers[tp.topic], key=lambda member: len(held[member.member_id]))
        held[receiver.member_id].add(tp)


def _balance(
    members: Sequence[MemberSubscription], held: _Held, kept: Mapping[TopicPartition, str]
) -> None:
    """Hand partitions along paths of members until no member can pass one, directly or
    through others, to a member holding at least two fewer.

    That end state has the least sum of squared loads, so it satisfies Kafka's balance criterion
    (among members with identical subscriptions, counts differ by at most one). Each step takes
    the path that revokes fewest partitions. Because the end state is optimal, the follow-up
    rebalance reaches an optimum again by moving only the revoked partitions: it revokes nothing.
    """
    partition_count = sum(len(tps) for tps in held.values())
    # Each path lowers the sum of squared member loads by at least 2, from at most count ** 2.
    for _ in range(partition_count**2 // 2 + 1):
        path = _cheapest_improving_path(members, held, kept)
        if path is None:
            return
        for move in path.moves:
            held[move.donor].remove(move.partition)
            held[move.receiver].add(move.partition)
    raise AssertionError("Balancing did not converge within its bound.")


def _cheapest_improving_path(
    members: Sequence[MemberSubscription], held: _Held, kept: Mapping[TopicPartition, str]
) -> _Path | None:
    """The path from a member to one holding at least two fewer that revokes fewest partitions
    (ties: the most loaded sources), or None when the group is balanced."""
    loads = {member.member_id: len(held[member.member_id]) for member in members}
    load_min = min(loads.values(), default=0)
    offers = {member.member_id: _offers(member.member_id, held, kept) for member in members}
    best: tuple[tuple[int, int], _Path] | None = None
    # One search per load level rather than per member: sources hold at least `level`, targets
    # at most level - 2, so every path found improves; a handful of levels, not hundreds.
    for level in sorted({load for load in loads.values() if load >= load_min + 2}, reverse=True):
        sources = [member for member in members if loads[member.member_id] >= level]
        sources.sort(key=lambda member: -loads[member.member_id])
        targets = {member_id for member_id, load in loads.items() if load <= level - 2}
        path = _cheapest_path(sources, targets, members, offers)
        if path is not None and (best is None or (path.revoked_count, -level) < best[0]):
            best = ((path.revoked_count, -level), path)
        if best is not None and best[0][0] == 0:
            break  # nothing beats a free path from a higher level
    return best[1] if best else None


def _offers(
    member_id: str, held: _Held, kept: Mapping[TopicPartition, str]
) -> dict[str, tuple[int, TopicPartition]]:
    """topic -> (1 if passing it on revokes it from this member else 0, the partition to pass):
    the cheapest partition of each topic the member holds, the lowest on a tie."""
    offers: dict[str, tuple[int, TopicPartition]] = {}
    for tp in held[member_id]:
        offer = (1 if kept.get(tp) == member_id else 0, tp)
        offers[tp.topic] = min(offers.get(tp.topic, offer), offer)
    return offers


def _cheapest_path(
    sources: Sequence[MemberSubscription],
    targets: set[str],
    members: Sequence[MemberSubscription],
    offers: Mapping[str, Mapping[str, tuple[int, TopicPartition]]],
) -> _Path | None:
    """The path from one of `sources` to one of `targets` that revokes fewest partitions (0-1
    BFS: passing on a partition the giver owned costs one revocation, any other costs nothing).
    """
    # Members with the same subscription take the same offers: price each offer once per class.
    classes: dict[frozenset[str], list[str]] = {}
    for member in members:
        classes.setdefault(member.topics, []).append(member.member_id)
    paths = {source.member_id: _Path(0, ()) for source in sources}
    queue, done = deque(paths), set()
    while queue:
        giver_id = queue.popleft()
        if giver_id in targets:
            return paths[giver_id]  # popped in cost order: no cheaper path to a target remains
        if giver_id in done:
            continue
        done.add(giver_id)
        for topics, taker_ids in classes.items():
            edge = _cheapest_offer(offers[giver_id], topics)
            if edge is None:
                continue
            path_cost = paths[giver_id].revoked_count + edge[0]
            for taker_id in taker_ids:
                known = paths.get(taker_id)
                if taker_id == giver_id or (known and known.revoked_count <= path_cost):
                    continue
                paths[taker_id] = paths[giver_id].then(edge[0], _Move(edge[1], giver_id, taker_id))
                # 0-1 BFS: free edges go to the front so members pop in cost order.
                if edge[0]:
                    queue.append(taker_id)
                else:
                    queue.appendleft(taker_id)
    return None


def _cheapest_offer(
    offers: Mapping[str, tuple[int, TopicPartition]], topics: frozenset[str]
) -> tuple[int, TopicPartition] | None:
    """The cheapest of `offers` on any of `topics`: iterates the smaller side."""
    if len(offers) < len(topics):
        return min((offer for topic, offer in offers.items() if topic in topics), default=None)
    return min((offers[topic] for topic in topics if topic in offers), default=None)


def _revoke_changing_owner(
    held: _Held, claims: Mapping[TopicPartition, tuple[str, ...]]
) -> Assignment:
    """Cooperative protocol: a partition whose new holder is not among its current owners is
    taken from them now and given to the new holder only by the follow-up rebalance."""
    revoking = {
        tp
        for member_id, tps in held.items()
        for tp in tps
        if tp in claims and member_id not in claims[tp]
    }
    return _frozen({member_id: tps - revoking for member_id, tps in held.items()}, revoking)
