"""The share-partition owner (api/core/shares/owner.py) on real Delta tables: a partition table
it reads, `_meta/share_states` it stores in. Acquisitions and acknowledgements survive the
owner (a new one, on this node or another, carries on from the table), delivery counts only
grow, a refused acknowledgement stores nothing, and a node whose share states another node
took is told so and stores nothing."""

from __future__ import annotations

import asyncio

import pytest

from api.core.shares.errors import InvalidRecordState
from api.core.shares.owner import LogRead, NotShareOwner, ShareKey, ShareOwner
from api.core.shares.share_partition import AcknowledgeType, Acquired, Limits
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.share_states import ShareStates
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig

KEY = ShareKey("workers", "jobs", 0, "topic-id-1")
LIMITS = Limits(lock_duration_ms=30_000, delivery_attempt_limit=3, max_in_flight=100)
ACCEPT, RELEASE = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE


async def blocking(function, *args, **kwargs):
    return await asyncio.to_thread(function, *args, **kwargs)


@pytest.fixture
def log(tmp_path):
    uri = str(tmp_path / "topics" / "jobs" / "0")
    DeltaPartitionLog.create(uri)
    log = DeltaPartitionLog.open(uri)
    log.commit_leadership(1, expected=None, hold=True)
    log.append([NewRecord(None, b"job-%d" % n) for n in range(6)], config=TopicConfig())
    return log


def owner(root, node_id: int = 1, now_ms: int = 0) -> ShareOwner:
    return ShareOwner(
        states=ShareStates(str(root)),
        node_id=node_id,
        blocking=blocking,
        clock_ms=lambda: now_ms,
    )


def acquire(owner: ShareOwner, log, member: str, records_max: int = 3, start: int = 0):
    async def read(from_offset: int, count: int) -> LogRead:
        found = log.read(from_offset=from_offset, records_max=count, bytes_max=1 << 20)
        offsets = found.records.column("offset").to_pylist()
        return LogRead(offsets, from_offset if found.next_offset is None else found.next_offset)

    async def earliest() -> int:
        return start

    return asyncio.run(
        owner.acquire(
            KEY, member, records_max=records_max, limits=LIMITS, read=read, start_offset=earliest
        )
    )


def acknowledge(owner: ShareOwner, member: str, pairs):
    return asyncio.run(owner.acknowledge(KEY, member, pairs, limits=LIMITS))


def test_what_was_acquired_and_acknowledged_outlives_the_owner(tmp_path, log):
    first = owner(tmp_path)
    assert acquire(first, log, "a") == [Acquired(0, 1), Acquired(1, 1), Acquired(2, 1)]
    acknowledge(first, "a", [(0, ACCEPT), (1, RELEASE)])
    restarted = owner(tmp_path)  # its locks are gone with it: 1 and 2 are available again
    assert acquire(restarted, log, "b", records_max=4) == [
        Acquired(1, 2),
        Acquired(2, 2),
        Acquired(3, 1),
        Acquired(4, 1),
    ]
    stored = ShareStates(str(tmp_path)).load("jobs", 0, "topic-id-1")["workers"]
    assert stored.start_offset == 1  # offset 0 is settled for good


def test_a_refused_acknowledgement_stores_nothing(tmp_path, log):
    node = owner(tmp_path)
    assert acknowledge(node, "a", []) == []  # nothing acquired yet: nothing stored either
    with pytest.raises(InvalidRecordState):
        acknowledge(node, "a", [(0, ACCEPT)])
    assert ShareStates(str(tmp_path)).load("jobs", 0, "topic-id-1") == {}
    acquire(node, log, "a", start=0)
    states = ShareStates(str(tmp_path))
    before = states.load("jobs", 0, "topic-id-1")
    with pytest.raises(InvalidRecordState):
        acknowledge(node, "b", [(0, ACCEPT)])  # not b's
    with pytest.raises(InvalidRecordState):
        acknowledge(node, "a", [(0, ACCEPT), (5, ACCEPT)])  # 5 was never acquired: all or none
    assert states.load("jobs", 0, "topic-id-1") == before
    acknowledge(node, "a", [(0, ACCEPT)])


def test_a_node_whose_share_states_were_taken_stores_nothing_more(tmp_path, log):
    old, new = owner(tmp_path, node_id=1), owner(tmp_path, node_id=2)
    acquire(old, log, "a")
    assert acquire(new, log, "b") == [Acquired(0, 2), Acquired(1, 2), Acquired(2, 2)]
    with pytest.raises(NotShareOwner):
        acknowledge(old, "a", [(0, ACCEPT)])
    stored = ShareStates(str(tmp_path)).load("jobs", 0, "topic-id-1")["workers"]
    assert stored.start_offset == 0  # the old owner's accept never landed
    acknowledge(new, "b", [(0, ACCEPT)])


def test_where_a_new_share_partition_starts_is_stored_even_when_nothing_is_acquired(tmp_path, log):
    """share.auto.offset.reset=latest places a new share partition at the end of the log; a
    record produced after that first, empty acquisition is delivered, not skipped by a
    second placement at the new end."""
    node = owner(tmp_path)
    assert acquire(node, log, "a", start=6) == []
    log.append([NewRecord(None, b"job-6")], config=TopicConfig())
    assert acquire(owner(tmp_path), log, "a", start=7) == [Acquired(6, 1)]
