"""The transaction coordinator's state objects (storage_layout/meta/transaction_state.py): each
change is the put-if-absent of the next number, so of two coordinators acting on one state only the
first changes it; superseded states go, ids of any characters round-trip."""

from __future__ import annotations

import dataclasses

import pytest

from storage_layout.meta.transaction_state import (
    PendingOffset,
    StateTaken,
    TransactionStateStore,
    TxnState,
    TxnStatus,
)
from storage_layout.records import TopicPartition


def empty(transactional_id: str) -> TxnState:
    return TxnState(transactional_id, 4, 0, TxnStatus.EMPTY, 60_000)


def test_a_state_round_trips_with_its_partitions_and_offsets(tmp_path):
    store = TransactionStateStore(str(tmp_path))
    state = dataclasses.replace(
        empty("orders-etl/é 1"),
        status=TxnStatus.ONGOING,
        partitions=(TopicPartition("orders", 0), TopicPartition("audit", 2)),
        groups=("etl",),
        offsets=(
            PendingOffset("etl", "orders", 0, 42, "meta"),
            PendingOffset("etl", "orders", 1, 7, None, 3),
        ),
    )
    stored = store.save(state)
    assert stored.sequence == 1
    assert store.load("orders-etl/é 1") == stored
    assert store.transactional_ids() == ["orders-etl/é 1"]
    assert store.load("another") is None


def test_of_two_coordinators_acting_on_one_state_only_the_first_changes_it(tmp_path):
    store = TransactionStateStore(str(tmp_path))
    first = store.save(empty("t"))
    store.save(dataclasses.replace(first, status=TxnStatus.ONGOING))
    with pytest.raises(StateTaken):
        store.save(dataclasses.replace(first, status=TxnStatus.PREPARE_ABORT))
    assert store.load("t").status is TxnStatus.ONGOING
    assert store.load("t").sequence == 2


def test_superseded_states_are_deleted(tmp_path):
    store = TransactionStateStore(str(tmp_path))
    state = store.save(empty("t"))
    for _ in range(5):
        state = store.save(state)
    names = sorted(p.name for p in (tmp_path / "_meta" / "transactions").iterdir())
    assert len(names) == 1 and names[0].endswith("000000000006.json")


def test_long_ids_are_stored_under_hashed_names_and_still_listed(tmp_path):
    """Ids whose hex would pass a file system's 255-byte names (Kafka sets no limit)."""
    store = TransactionStateStore(str(tmp_path))
    long_id, short_id = "t" * 400, "short"
    for transactional_id in (long_id, short_id):
        store.save(TxnState(transactional_id, 1, 0, TxnStatus.EMPTY, 60_000))
    assert store.load(long_id).transactional_id == long_id
    assert store.transactional_ids() == sorted([long_id, short_id])
    group = "g" * 300
    store.note_group(group, long_id)
    assert store.transactions_of_group(group) == [long_id]
    store.forget_group(group, long_id)
    assert store.transactions_of_group(group) == []
