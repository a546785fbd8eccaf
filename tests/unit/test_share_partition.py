"""The share partition's rules (api/core/shares/share_partition.py), Kafka's SharePartition:
acquisition with delivery counts and locks, acknowledgement by the holder only, release and
lock expiry up to the delivery attempt limit, gaps, the in-flight limit, and the stored form."""

from __future__ import annotations

import pytest

from api.core.shares.errors import InvalidRecordState
from api.core.shares.share_partition import (
    AcknowledgeType,
    Acquired,
    Archived,
    ArchiveReason,
    Limits,
    RecordState,
    SharePartition,
)
from storage_layout.meta.share_states import ShareBatch

LIMITS = Limits(lock_duration_ms=1_000, delivery_attempt_limit=2, max_in_flight=10)
ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


def acquire(part: SharePartition, member: str, offsets, read_to=None, records_max=100, now_ms=0):
    read_to = max(offsets, default=part.end_offset - 1) + 1 if read_to is None else read_to
    return part.acquire(
        member, offsets, read_to, records_max=records_max, limits=LIMITS, now_ms=now_ms
    )


def ack(part: SharePartition, member: str, pairs, now_ms=0):
    return part.acknowledge(member, pairs, limits=LIMITS, now_ms=now_ms)


def test_members_acquire_different_records_in_offset_order():
    part = SharePartition.starting_at(0)
    part, first = acquire(part, "a", range(5), records_max=3)
    assert first == [Acquired(0, 1), Acquired(1, 1), Acquired(2, 1)]
    assert part.next_fetch_offset() == 3  # what a read for the next member starts at
    part, second = acquire(part, "b", [3, 4])
    assert second == [Acquired(3, 1), Acquired(4, 1)]
    assert (part.start_offset, part.end_offset) == (0, 5)
    assert part.held_by("a") == [0, 1, 2] and part.held_by("b") == [3, 4]
    assert part.counts()["acquired"] == 5


def test_accepted_records_settle_and_the_start_offset_moves_past_them():
    part, _ = acquire(SharePartition.starting_at(10), "a", [10, 11, 12])
    part, archived = ack(part, "a", [(11, ACCEPT), (10, ACCEPT)])
    assert archived == [] and part.start_offset == 12
    with pytest.raises(InvalidRecordState, match="not in flight"):
        ack(part, "a", [(10, ACCEPT)])  # twice: nothing held there any more
    assert part.counts() == {"available": 0, "acquired": 1, "acknowledged": 0, "archived": 0}


def test_released_records_come_back_with_a_growing_count_until_the_limit_archives_them():
    part, _ = acquire(SharePartition.starting_at(0), "a", [0])
    part, archived = ack(part, "a", [(0, RELEASE)])
    assert archived == [] and part.records[0].state == RecordState.AVAILABLE
    part, again = acquire(part, "b", [0])
    assert again == [Acquired(0, 2)]
    part, archived = ack(part, "b", [(0, RELEASE)])
    assert archived == [Archived(0, 2, ArchiveReason.DELIVERY_LIMIT)]
    assert part.start_offset == 1  # archived: settled


def test_a_rejected_record_is_archived_as_rejected():
    part, _ = acquire(SharePartition.starting_at(0), "a", [0, 1])
    part, archived = ack(part, "a", [(0, REJECT)])
    assert archived == [Archived(0, 1, ArchiveReason.REJECTED)]
    assert part.start_offset == 1


def test_an_expired_lock_frees_the_record_and_its_holder_can_no_longer_acknowledge_it():
    part, _ = acquire(SharePartition.starting_at(0), "a", [0, 1], now_ms=0)
    same, archived = part.expire_locks(limits=LIMITS, now_ms=999)
    assert same is part and archived == []
    part, archived = part.expire_locks(limits=LIMITS, now_ms=1_000)
    assert archived == [] and part.counts()["available"] == 2
    with pytest.raises(InvalidRecordState, match="only an acquired record"):
        ack(part, "a", [(0, ACCEPT)], now_ms=1_001)
    part, again = acquire(part, "b", [0, 1], now_ms=2_000)
    assert again == [Acquired(0, 2), Acquired(1, 2)]
    with pytest.raises(InvalidRecordState, match="expired"):
        ack(part, "b", [(0, ACCEPT)], now_ms=3_000)  # not swept yet, but past its deadline
    part, archived = part.expire_locks(limits=LIMITS, now_ms=3_000)
    assert [a.reason for a in archived] == [ArchiveReason.DELIVERY_LIMIT] * 2


def test_bad_acknowledgements_change_nothing():
    part, _ = acquire(SharePartition.starting_at(0), "a", [0, 1])
    part, _ = acquire(part, "b", [2])
    for member, pairs, message in [
        ("b", [(0, ACCEPT)], "another member"),
        ("a", [(7, ACCEPT)], "not in flight"),
        ("a", [(0, ACCEPT), (0, REJECT)], "twice"),
        ("a", [(0, ACCEPT), (2, ACCEPT)], "another member"),  # all or none
    ]:
        with pytest.raises(InvalidRecordState, match=message):
            ack(part, member, pairs)
    assert part.held_by("a") == [0, 1] and part.start_offset == 0


def test_renewal_extends_the_lock():
    part, _ = acquire(SharePartition.starting_at(0), "a", [0], now_ms=0)
    part, _ = ack(part, "a", [(0, AcknowledgeType.RENEW)], now_ms=900)
    assert part.records[0].deadline_ms == 1_900
    part, _ = ack(part, "a", [(0, ACCEPT)], now_ms=1_500)
    assert part.start_offset == 1


def test_offsets_without_records_are_archived_undelivered():
    """Compacted offsets and transaction markers: never delivered, and a GAP
    acknowledgement of one is no change."""
    part, got = acquire(SharePartition.starting_at(0), "a", [0, 1, 3], read_to=6)
    assert got == [Acquired(0, 1), Acquired(1, 1), Acquired(3, 1)]
    assert part.end_offset == 6  # 4 and 5 ended the read without a record
    assert {o: r.state for o, r in part.records.items() if o in (2, 4, 5)} == dict.fromkeys(
        (2, 4, 5), RecordState.ARCHIVED
    )
    part, _ = ack(part, "a", [(0, ACCEPT), (1, ACCEPT), (2, AcknowledgeType.GAP)])
    assert part.start_offset == 3


def test_no_more_than_the_in_flight_limit_is_acquired():
    part, got = acquire(SharePartition.starting_at(0), "a", range(15))
    assert len(got) == LIMITS.max_in_flight and part.end_offset == 10
    part, _ = ack(part, "a", [(0, ACCEPT), (1, ACCEPT)])
    part, more = acquire(part, "b", range(10, 15))
    assert [a.offset for a in more] == [10, 11]


def test_a_member_leaving_releases_what_it_held():
    part, _ = acquire(SharePartition.starting_at(0), "a", [0, 1])
    part, _ = acquire(part, "b", [2])
    part, archived = part.release_member("a", limits=LIMITS)
    assert archived == [] and part.counts()["available"] == 2 and part.held_by("b") == [2]


def test_the_stored_form_round_trips_and_locks_do_not_survive_it():
    part, _ = acquire(SharePartition.starting_at(5), "a", [5, 6, 7, 8])
    part, _ = ack(part, "a", [(6, ACCEPT), (7, RELEASE)])
    batches = part.batches()
    assert batches == [
        ShareBatch(5, 5, RecordState.ACQUIRED, 1),
        ShareBatch(6, 6, RecordState.ACKNOWLEDGED, 1),
        ShareBatch(7, 7, RecordState.AVAILABLE, 1),
        ShareBatch(8, 8, RecordState.ACQUIRED, 1),
    ]
    loaded = SharePartition.from_batches(part.start_offset, batches, LIMITS)
    assert (loaded.start_offset, loaded.end_offset) == (5, 9)
    assert loaded.counts() == {"available": 3, "acquired": 0, "acknowledged": 1, "archived": 0}
    loaded, again = acquire(loaded, "b", [5, 7, 8])
    assert again == [Acquired(5, 2), Acquired(7, 2), Acquired(8, 2)]  # counts only grow


def test_moving_the_start_forgets_what_lies_before():
    part, _ = acquire(SharePartition.starting_at(0), "a", [0, 1, 2])
    moved = part.moved_to(2)
    assert (moved.start_offset, moved.end_offset, sorted(moved.records)) == (2, 3, [2])
    assert part.moved_to(0) is part


def test_a_stored_acquisition_at_the_delivery_limit_is_archived_on_load():
    """Its lock went with its owner, as if it expired: at the limit it is archived, so an
    owner change never delivers a record more times than the limit allows."""
    at_limit = [
        ShareBatch(3, 3, RecordState.ACQUIRED, 2),
        ShareBatch(4, 4, RecordState.ACQUIRED, 1),
    ]
    loaded = SharePartition.from_batches(3, at_limit, LIMITS)
    assert loaded.start_offset == 4 and loaded.records[4].state == RecordState.AVAILABLE


def test_a_lowered_delivery_limit_archives_available_records_already_past_it():
    part = SharePartition.from_batches(0, [ShareBatch(0, 1, 0, 4)], Limits())
    spent, archived = part.past_limit(limits=Limits(delivery_attempt_limit=2))
    assert [(a.offset, a.delivery_count, a.reason) for a in archived] == [
        (0, 4, ArchiveReason.DELIVERY_LIMIT),
        (1, 4, ArchiveReason.DELIVERY_LIMIT),
    ]
    assert spent.start_offset == 2 and spent.records == {}
    unchanged, none = part.past_limit(limits=Limits())
    assert unchanged is part and none == []
