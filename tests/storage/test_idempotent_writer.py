"""PartitionWriter with idempotent producers on real Delta tables: sequence rules, group commit
echoes, atomic state with the data, and the rebuild after a reopen."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from deltalake import DeltaTable

from api.core.writer import CommitLimits, PartitionWriter
from storage_layout.errors import (
    DuplicateSequence,
    OutOfOrderSequence,
    ProducerFenced,
    UnknownProducerId,
)
from storage_layout.log import DeltaPartitionLog, producer_scan
from storage_layout.producer_state import ProducerBatch
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig

LIMITS = CommitLimits(linger_ms=5, records_max=10_000, bytes_max=10**8)


def records(count: int, prefix: str = "v") -> list[NewRecord]:
    return [NewRecord(None, f"{prefix}{i}".encode()) for i in range(count)]


def stored(uri: str) -> list[tuple]:
    table = DeltaTable(uri).to_pyarrow_table(
        columns=["offset", "value", "producer_id", "producer_epoch", "sequence"]
    )
    return sorted(zip(*table.to_pydict().values(), strict=True))


@pytest.fixture
def table_uri(tmp_path) -> str:
    uri = str(tmp_path / "t" / "0")
    DeltaPartitionLog.create(uri)
    return uri


def new_writer(table_uri: str, executor, limits: CommitLimits = LIMITS) -> PartitionWriter:
    return PartitionWriter(
        DeltaPartitionLog.open(table_uri), config=TopicConfig, executor=executor, limits=limits
    )


def run(table_uri: str, scenario, limits: CommitLimits = LIMITS):
    """Run `scenario(writer)` on a fresh writer over the table, then close it."""

    async def main():
        with ThreadPoolExecutor(2) as executor:
            writer = new_writer(table_uri, executor, limits)
            try:
                return await scenario(writer)
            finally:
                await writer.close()

    return asyncio.run(main())


def send(writer, producer: int, epoch: int, sequence: int, count: int, prefix="v"):
    batch = ProducerBatch(producer, epoch, sequence, count)
    return writer.append(records(count, prefix), 1, batch)


def test_sequences_are_stored_with_the_records(table_uri):
    """Idempotent records carry producer_id, epoch and consecutive sequences in the table."""

    async def scenario(writer):
        await writer.append(records(1, "plain"), 1)
        return await send(writer, 7, 0, 0, 2)

    ack = run(table_uri, scenario)
    assert ack.base_offset == 1
    assert stored(table_uri) == [
        (0, b"plain0", None, None, None),
        (1, b"v0", 7, 0, 0),
        (2, b"v1", 7, 0, 1),
    ]


def test_consecutive_batches_and_retry_in_window(table_uri):
    """Consecutive batches append; a retried batch gets its original offsets, no new rows."""

    async def scenario(writer):
        first = await send(writer, 1, 0, 0, 3)
        second = await send(writer, 1, 0, 3, 2)
        retry = await send(writer, 1, 0, 0, 3, prefix="again")
        return first, second, retry

    first, second, retry = run(table_uri, scenario)
    assert (first.base_offset, second.base_offset) == (0, 3)
    assert (retry.base_offset, retry.count, retry.append_time_ms) == (0, 3, first.append_time_ms)
    assert [row[0] for row in stored(table_uri)] == [0, 1, 2, 3, 4]


def test_duplicate_in_the_same_group_commit(table_uri):
    """A retry queued in the same group commit as its original is echoed, appended once."""

    async def scenario(writer):
        return await asyncio.gather(send(writer, 1, 0, 0, 2), send(writer, 1, 0, 0, 2, "dup"))

    original, echo = run(table_uri, scenario)
    assert original == echo
    assert [row[1] for row in stored(table_uri)] == [b"v0", b"v1"]


def test_rule_breakers_fail_alone_in_their_group(table_uri):
    """A gap, a stale epoch and an old sequence fail; the good batches of the group commit."""

    async def scenario(writer):
        await send(writer, 1, 1, 0, 6)  # epoch 1, sequences 0..5 as six batches below
        for sequence in range(6, 12):
            await send(writer, 1, 1, sequence, 1)
        return await asyncio.gather(
            send(writer, 1, 1, 20, 1),  # gap
            send(writer, 1, 0, 12, 1),  # older epoch
            send(writer, 1, 1, 0, 1),  # older than the 5-batch window
            send(writer, 2, 0, 3, 1),  # unknown producer, not at 0
            send(writer, 1, 1, 12, 1),  # the next one: appended
            return_exceptions=True,
        )

    gap, fenced, old, unknown, good = run(table_uri, scenario)
    assert isinstance(gap, OutOfOrderSequence)
    assert isinstance(fenced, ProducerFenced)
    assert isinstance(old, DuplicateSequence)
    assert isinstance(unknown, UnknownProducerId)
    assert good.base_offset == 12
    assert len(stored(table_uri)) == 13


def test_new_epoch_starts_from_zero_and_fences_the_old(table_uri):
    """A higher epoch restarts at sequence 0; afterwards the old epoch is fenced."""

    async def scenario(writer):
        await send(writer, 1, 0, 0, 5)
        bumped = await send(writer, 1, 1, 0, 1)
        with pytest.raises(ProducerFenced):
            await send(writer, 1, 0, 5, 1)
        return bumped

    assert run(table_uri, scenario).base_offset == 5


def test_state_is_rebuilt_from_the_table_after_reopen(table_uri):
    """A new writer (restart, new leader) recognises retries and continues the sequences."""

    async def before(writer):
        await send(writer, 1, 0, 0, 2)
        await writer.append(records(1, "plain"), 1)
        return await send(writer, 1, 0, 2, 3)

    async def after(writer):
        retry = await send(writer, 1, 0, 2, 3)
        with pytest.raises(OutOfOrderSequence):
            await send(writer, 1, 0, 9, 1)
        following = await send(writer, 1, 0, 5, 1)
        return retry, following

    original = run(table_uri, before)
    retry, following = run(table_uri, after)
    assert retry.base_offset == original.base_offset == 3
    assert following.base_offset == 6
    assert len(stored(table_uri)) == 7


def test_failed_commit_leaves_no_state(table_uri, monkeypatch):
    """When the commit fails, the tentative sequences are dropped: the retry appends."""
    attempts = {"count": 0}
    original_append = DeltaPartitionLog.append

    def flaky_append(self, *args, **kwargs):
        attempts["count"] += 1
        if attempts["count"] == 1:
            raise OSError("disk on fire")
        return original_append(self, *args, **kwargs)

    monkeypatch.setattr(DeltaPartitionLog, "append", flaky_append)

    async def scenario(writer):
        with pytest.raises(OSError):
            await send(writer, 1, 0, 0, 2)
        return await send(writer, 1, 0, 0, 2)

    assert run(table_uri, scenario).base_offset == 0
    assert len(stored(table_uri)) == 2


def test_an_idle_producer_expires_from_the_writer(table_uri):
    """After producer_expiration_ms without writing, the writer has forgotten the producer:
    its next sequence is UNKNOWN_PRODUCER_ID, a new epoch from 0 is accepted."""

    async def scenario(writer):
        await send(writer, 9, 0, 0, 1)
        await asyncio.sleep(0.3)
        with pytest.raises(UnknownProducerId):
            await send(writer, 9, 0, 1, 1)
        return await send(writer, 9, 1, 0, 1)

    limits = CommitLimits(5, 10_000, 10**8, producer_expiration_ms=200)
    ack = run(table_uri, scenario, limits)
    assert ack.base_offset == 1


def test_a_producer_older_than_the_rebuilt_state_continues_after_a_new_writer(
    table_uri, monkeypatch
):
    """A producer that paused while others wrote more commits than the state is rebuilt from
    (PRODUCER_STATE_FILES_MAX, 5 here) continues its sequence with a new writer (a new leader):
    it is found in older files. It was UNKNOWN_PRODUCER_ID (chaos T2). A retry of its last
    batch is still a duplicate; a producer that never wrote stays unknown."""
    monkeypatch.setattr(producer_scan, "PRODUCER_STATE_FILES_MAX", 5)

    async def before(writer):
        for sequence in range(3):
            await send(writer, 1, 0, sequence, 1, prefix="paused")
        for sequence in range(8):
            await send(writer, 2, 0, sequence, 1, prefix="busy")

    async def after(writer):
        retried = await send(writer, 1, 0, 2, 1, prefix="paused")
        continued = await send(writer, 1, 0, 3, 1, prefix="paused")
        with pytest.raises(UnknownProducerId):
            await send(writer, 99, 0, 5, 1)
        return retried, continued

    run(table_uri, before)
    assert DeltaPartitionLog.open(table_uri).producer_states().entry(1) is None
    retried, continued = run(table_uri, after)
    assert (retried.base_offset, continued.base_offset) == (2, 11)
    assert len(stored(table_uri)) == 12


def test_a_sequence_error_is_checked_against_the_table_first(table_uri):
    """Another writer (a node that led the partition for a moment) appends a producer's next
    batch; this writer, whose state predates it, then gets the batch after: it notices the
    table moved, rebuilds its state and appends, instead of answering OUT_OF_ORDER_SEQUENCE
    from its old state (chaos T2 saw that 409)."""

    async def scenario(writer):
        for sequence in range(3):
            await send(writer, 1, 0, sequence, 1)
        with ThreadPoolExecutor(1) as executor:
            other = new_writer(table_uri, executor)
            try:
                await send(other, 1, 0, 3, 1, prefix="other")
            finally:
                await other.close()
        return await send(writer, 1, 0, 4, 1)

    assert run(table_uri, scenario).base_offset == 4
    assert [row[2:] for row in stored(table_uri)] == [(1, 0, s) for s in range(5)]
