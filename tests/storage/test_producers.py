"""Producer id allocation in `_meta/producers`: unique ids across processes, epoch bumps."""

from __future__ import annotations

import multiprocessing

from deltalake import DeltaTable

from storage_layout.meta import producers as producers_module
from storage_layout.meta.producers import ProducerIdAllocator, ProducerIdentity


def test_ids_are_consecutive_from_zero_at_epoch_zero(tmp_path):
    """Plain allocations hand out 0, 1, 2 … with epoch 0, also after a reopen."""
    allocator = ProducerIdAllocator(str(tmp_path))
    first = [allocator.init_producer(client_id="c").producer_id for _ in range(3)]
    again = ProducerIdAllocator(str(tmp_path)).init_producer()
    assert first == [0, 1, 2] and again == ProducerIdentity(3, 0)


def test_transactional_id_keeps_its_id_and_bumps_the_epoch(tmp_path):
    """Re-initialising a transactional id returns its producer id with epoch + 1."""
    allocator = ProducerIdAllocator(str(tmp_path))
    first = allocator.init_producer("orders")
    other = allocator.init_producer("payments")
    second = ProducerIdAllocator(str(tmp_path)).init_producer("orders")
    assert second == ProducerIdentity(first.producer_id, 1)
    assert other.producer_id != first.producer_id


def test_epoch_overflow_allocates_a_new_id(tmp_path, monkeypatch):
    """At the largest epoch, the next initialisation gets a fresh id at epoch 0."""
    monkeypatch.setattr(producers_module, "EPOCH_MAX", 1)
    allocator = ProducerIdAllocator(str(tmp_path))
    epochs = [allocator.init_producer("t") for _ in range(3)]
    assert [e.producer_epoch for e in epochs] == [0, 1, 0]
    assert epochs[2].producer_id > epochs[0].producer_id
    assert allocator.init_producer("t") == ProducerIdentity(epochs[2].producer_id, 1)


def _allocate_many(root: str, count: int, queue) -> None:
    allocator = ProducerIdAllocator(root)
    queue.put([allocator.init_producer().producer_id for _ in range(count)])


def test_concurrent_processes_never_get_the_same_id(tmp_path):
    """Four processes allocating at once on one root get distinct ids (the txn CAS)."""
    ProducerIdAllocator(str(tmp_path))  # create the table once, as a gateway start does
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [
        context.Process(target=_allocate_many, args=(str(tmp_path), 8, queue)) for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    ids = [i for _ in workers for i in queue.get(timeout=120)]
    for worker in workers:
        worker.join(30)
    assert len(ids) == len(set(ids)) == 32
    stored = DeltaTable(str(tmp_path / "_meta" / "producers")).to_pyarrow_table()
    assert sorted(stored.column("producer_id").to_pylist()) == sorted(ids)
