"""The transaction coordinator's state objects (storage_layout/transaction_state.py): each change
is the put-if-absent of the next number, so of two coordinators acting on one state only the
first changes it; superseded states go, ids of any characters round-trip."""

from __future__ import annotations

import dataclasses

import pytest

from storage_layout.records import TopicPartition
from storage_layout.transaction_state import (
    PendingOffset,
    StateTaken,
    TransactionStateStore,
    TxnState,
    TxnStatus,
)


def empty(transactional_id: str) -> TxnState:
    return TxnState(transactional_id, 4, 0, TxnStatus.EMPTY, 60_000)


def test_a_state_round_trips_with_its_partitions_and_offsets(tmp_path):
    store = TransactionStateStore(str(tmp_path))
    state = dataclasses.replace(
        empty("orders-etl/é 1"),
        status=TxnStatus.ONGOING,
        partitions=(TopicPartition("orders", 0), TopicPartition("audit", 2)),
        groups=("etl",),
        offsets=(PendingOffset("etl", "orders", 0, 42, "meta"),),
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
