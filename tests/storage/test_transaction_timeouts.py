"""transaction.timeout.ms on an injected clock: a transaction left open is aborted by the
coordinator once its timeout has passed, and not a millisecond before; time is advanced, never
slept. The coordinator keeps its states in a real store and takes producer ids from the real
allocator on a local root; the partitions' leaders and the groups' coordinator it talks to are
recorders of what it asked of them."""

from __future__ import annotations

import asyncio

import pytest

from api.core.errors import ConcurrentTransactions, NotLeader
from api.core.transactions import TransactionCoordinator
from api.core.writer import TransactionMarker
from storage_layout.meta.producers import ProducerIdAllocator
from storage_layout.meta.transaction_state import TransactionStateStore, TxnStatus
from storage_layout.records import TopicPartition
from storage_layout.schema import CONTROL_ABORT

TIMEOUT_MS = 60_000


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now_ms


async def blocking(function, *args, **kwargs):
    return await asyncio.to_thread(function, *args, **kwargs)


def coordinator(
    root: str, clock: FakeClock, markers: list, unreachable: set | None = None
) -> TransactionCoordinator:
    """`unreachable`: partitions whose leader cannot be reached while they are in it."""
    allocator = ProducerIdAllocator(root)
    unreachable = set() if unreachable is None else unreachable

    async def init_producer(transactional_id: str):
        return await blocking(allocator.init_producer, transactional_id, None)

    async def write_marker(topic: str, partition: int, marker: TransactionMarker) -> None:
        if (topic, partition) in unreachable:
            raise NotLeader(f"The leader of {topic}/{partition} is unreachable; retry.")
        markers.append((topic, partition, marker))

    async def commit_offsets(group_id, commits, producer_id) -> None:
        raise AssertionError("no group takes part in these transactions")

    return TransactionCoordinator(
        store=TransactionStateStore(root),
        node_id=0,
        live_nodes=lambda: [0],
        init_producer=init_producer,
        write_marker=write_marker,
        commit_offsets=commit_offsets,
        blocking=blocking,
        clock_ms=clock,
    )


async def open_transaction(transactions: TransactionCoordinator, transactional_id: str):
    identity = await transactions.init_producer(transactional_id, TIMEOUT_MS)
    partitions = [TopicPartition("orders", 0), TopicPartition("orders", 1)]
    await transactions.add_partitions(
        transactional_id, identity.producer_id, identity.producer_epoch, partitions
    )
    return identity


def test_an_open_transaction_is_aborted_once_its_timeout_has_passed(tmp_path):
    async def scenario() -> None:
        clock, markers = FakeClock(), []
        transactions = coordinator(str(tmp_path), clock, markers)
        identity = await open_transaction(transactions, "etl")

        clock.now_ms += TIMEOUT_MS  # exactly the timeout: not past it yet
        await transactions.sweep()
        assert (await transactions.describe("etl")).status is TxnStatus.ONGOING
        assert markers == []

        clock.now_ms += 1
        await transactions.sweep()
        state = await transactions.describe("etl")
        assert state.status is TxnStatus.COMPLETE_ABORT
        assert sorted((topic, partition) for topic, partition, _ in markers) == [
            ("orders", 0),
            ("orders", 1),
        ]
        for _, _, marker in markers:  # aborted with a bumped epoch: the producer is fenced
            assert marker.control == CONTROL_ABORT
            assert marker.producer_id == identity.producer_id
            assert marker.epoch > identity.producer_epoch

    asyncio.run(scenario())


def test_a_transaction_within_its_timeout_is_left_open(tmp_path):
    async def scenario() -> None:
        clock, markers = FakeClock(), []
        transactions = coordinator(str(tmp_path), clock, markers)
        await open_transaction(transactions, "etl")
        for _ in range(5):
            clock.now_ms += TIMEOUT_MS // 10
            await transactions.sweep()
        assert (await transactions.describe("etl")).status is TxnStatus.ONGOING
        assert markers == []

    asyncio.run(scenario())


def test_a_retried_v2_end_waits_for_the_completion_then_is_answered_again(tmp_path):
    """KIP-890's end bumps the epoch when it prepares. If the markers cannot all be written
    (a leader unreachable: the coordinator's node died there in TX2), the client retries its
    end with the epoch it had: CONCURRENT_TRANSACTIONS while the transaction is being
    completed (it was PRODUCER_FENCED, which made Kafka's Java producer give up a commit that
    then landed), and once complete, the same answer as the first end would have had."""

    async def scenario() -> None:
        clock, markers, unreachable = FakeClock(), [], {("orders", 1)}
        transactions = coordinator(str(tmp_path), clock, markers, unreachable)
        identity = await open_transaction(transactions, "etl")
        ending = (identity.producer_id, identity.producer_epoch)
        with pytest.raises(NotLeader):
            await transactions.end("etl", *ending, True, bump_epoch=True)
        assert (await transactions.describe("etl")).status is TxnStatus.PREPARE_COMMIT
        with pytest.raises(ConcurrentTransactions):
            await transactions.end("etl", *ending, True, bump_epoch=True)
        unreachable.clear()
        await transactions.sweep()
        assert (await transactions.describe("etl")).status is TxnStatus.COMPLETE_COMMIT
        answered = await transactions.end("etl", *ending, True, bump_epoch=True)
        assert answered.producer_epoch == identity.producer_epoch + 1

    asyncio.run(scenario())
