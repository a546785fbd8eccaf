"""PartitionWriter with a transaction's batches and markers on real Delta tables (FORMAT.md
§14): batches keep the idempotent rules and are marked transactional, a marker is committed
alone after what was queued before it, and a fenced epoch's marker is refused."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from deltalake import DeltaTable

from api.core.writer import CommitLimits, PartitionWriter, TransactionMarker
from storage_layout.errors import ProducerFenced
from storage_layout.log import DeltaPartitionLog
from storage_layout.producer_state import ProducerBatch
from storage_layout.records import NewRecord
from storage_layout.schema import CONTROL_ABORT, CONTROL_COMMIT
from storage_layout.topic_config import TopicConfig

LIMITS = CommitLimits(linger_ms=0, records_max=10_000, bytes_max=10**8)
PRODUCER = 11


def records(*values: str) -> list[NewRecord]:
    return [NewRecord(None, value.encode()) for value in values]


def batch(epoch: int, base_sequence: int, count: int) -> ProducerBatch:
    return ProducerBatch(PRODUCER, epoch, base_sequence, count, transactional=True)


@pytest.fixture
def table_uri(tmp_path) -> str:
    uri = str(tmp_path / "t" / "0")
    DeltaPartitionLog.create(uri)
    return uri


def run(table_uri: str, scenario):
    async def main():
        with ThreadPoolExecutor(2) as executor:
            log = DeltaPartitionLog.open(table_uri)
            writer = PartitionWriter(log, config=TopicConfig, executor=executor, limits=LIMITS)
            try:
                return await scenario(writer)
            finally:
                await writer.close()

    return asyncio.run(main())


def stored(uri: str) -> list[tuple]:
    columns = ["offset", "value", "producer_epoch", "transactional", "control"]
    table = DeltaTable(uri).to_pyarrow_table(columns=columns).sort_by("offset")
    return [tuple(row.values()) for row in table.to_pylist()]


def test_a_marker_follows_the_batches_queued_before_it(table_uri):
    async def scenario(writer: PartitionWriter):
        first = writer.submit(records("a", "b"), 2, batch(0, 0, 2))
        plain = writer.submit(records("plain"), 5)
        marker = writer.submit_marker(TransactionMarker(PRODUCER, 0, CONTROL_COMMIT))
        after = writer.submit(records("c"), 1, batch(0, 2, 1))
        return await asyncio.gather(first, plain, marker, after)

    acks = run(table_uri, scenario)
    assert [ack.base_offset for ack in acks] == [0, 2, 3, 4]
    assert stored(table_uri) == [
        (0, b"a", 0, True, None),
        (1, b"b", 0, True, None),
        (2, b"plain", None, None, None),
        (3, None, 0, True, CONTROL_COMMIT),
        (4, b"c", 0, True, None),
    ]
    index = DeltaPartitionLog.open(table_uri).transaction_index()
    assert dict(index.open_first_offsets) == {PRODUCER: 4}


def test_a_fenced_epochs_marker_is_refused_and_appends_nothing(table_uri):
    async def scenario(writer: PartitionWriter):
        await writer.submit(records("old"), 1, batch(0, 0, 1))
        await writer.submit(records("new"), 1, batch(1, 0, 1))
        with pytest.raises(ProducerFenced):
            await writer.submit_marker(TransactionMarker(PRODUCER, 0, CONTROL_ABORT))
        return await writer.submit_marker(TransactionMarker(PRODUCER, 1, CONTROL_ABORT))

    ack = run(table_uri, scenario)
    assert ack.base_offset == 2
    assert [row[0] for row in stored(table_uri)] == [0, 1, 2]
    index = DeltaPartitionLog.open(table_uri).transaction_index()
    assert index.open_first_offsets == {}
    assert [(a.first_offset, a.last_offset) for a in index.aborted] == [(0, 2)]


def test_an_abort_marker_of_a_bumped_epoch_fences_the_zombie_even_after_a_reopen(table_uri):
    async def before(writer: PartitionWriter):
        await writer.submit(records("open"), 1, batch(0, 0, 1))
        await writer.submit_marker(TransactionMarker(PRODUCER, 1, CONTROL_ABORT))
        with pytest.raises(ProducerFenced):
            await writer.submit(records("zombie"), 1, batch(0, 1, 1))

    async def after(writer: PartitionWriter):
        with pytest.raises(ProducerFenced):
            await writer.submit(records("zombie"), 1, batch(0, 1, 1))
        return await writer.submit(records("successor"), 1, batch(1, 0, 1))

    run(table_uri, before)
    assert run(table_uri, after).base_offset == 2  # the state rebuilt from the table
    assert [row[1] for row in stored(table_uri)] == [b"open", None, b"successor"]
