"""A topic's `delta.commit.interval.ms` on a real Delta table: commits of one partition come no
closer together than the interval, whatever arrives meanwhile waits for the next one and is
acknowledged only after it, a quiet partition commits at once, and the config's bounds are
Kafka-style refusals. Plain batches (the pipelined path) and idempotent ones both."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from deltalake import DeltaTable

from api.core.writer import CommitLimits, PartitionWriter
from storage_layout.errors import InvalidConfig
from storage_layout.log import DeltaPartitionLog
from storage_layout.producer_state import ProducerBatch
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig

LIMITS = CommitLimits(linger_ms=0, records_max=10_000, bytes_max=10**8)
INTERVAL_MS = 400


@pytest.fixture
def log(tmp_path) -> DeltaPartitionLog:
    uri = str(tmp_path / "t" / "0")
    DeltaPartitionLog.create(uri)
    return DeltaPartitionLog.open(uri)


def commit_times_ms(uri: str) -> list[int]:
    """The append commits' timestamps (commitInfo), version 1 on (0 creates the table)."""
    history = DeltaTable(uri).history()
    return sorted(entry["timestamp"] for entry in history if entry["version"] > 0)


def run(log: DeltaPartitionLog, config: TopicConfig, scenario):
    async def main():
        with ThreadPoolExecutor(4) as executor:
            writer = PartitionWriter(log, config=lambda: config, executor=executor, limits=LIMITS)
            try:
                return await scenario(writer)
            finally:
                await writer.close()

    return asyncio.run(main())


async def produce_spaced(writer, count: int, spacing_s: float, producer=None):
    """`count` one-record produces `spacing_s` apart; (ack, seconds until acknowledged)."""

    async def one(index: int):
        started = time.monotonic()
        batch = None if producer is None else ProducerBatch(producer, 0, index, 1)
        ack = await writer.submit([NewRecord(None, f"v{index}".encode())], 2, batch)
        return ack, time.monotonic() - started

    tasks = []
    for index in range(count):
        tasks.append(asyncio.ensure_future(one(index)))
        await asyncio.sleep(spacing_s)
    return await asyncio.gather(*tasks)


@pytest.mark.parametrize("producer", [None, 7], ids=["plain", "idempotent"])
def test_commits_are_spaced_by_the_interval_and_gather_what_comes(log, producer):
    config = TopicConfig.from_mapping({"delta.commit.interval.ms": str(INTERVAL_MS)})
    answers = run(log, config, lambda w: produce_spaced(w, 40, 0.05, producer))
    assert [ack.base_offset for ack, _ in answers] == list(range(40))
    times = commit_times_ms(log.table_uri)
    # 40 produces over ~2 s: one commit per interval, not one per produce
    assert 4 <= len(times) <= 2000 // INTERVAL_MS + 2, times
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert min(gaps) >= INTERVAL_MS - 50, gaps  # commitInfo times are whole milliseconds
    assert max(seconds for _, seconds in answers) < (INTERVAL_MS + 1000) / 1000
    table = DeltaTable(log.table_uri).to_pyarrow_table(columns=["offset", "value"])
    assert sorted(table.column("offset").to_pylist()) == list(range(40))


def test_without_the_interval_each_spaced_produce_is_its_own_commit(log):
    answers = run(log, TopicConfig(), lambda w: produce_spaced(w, 10, 0.05))
    assert [ack.base_offset for ack, _ in answers] == list(range(10))
    assert len(commit_times_ms(log.table_uri)) == 10


def test_a_quiet_partition_commits_at_once(log):
    config = TopicConfig.from_mapping({"delta.commit.interval.ms": "5000"})
    answers = run(log, config, lambda w: produce_spaced(w, 1, 0.0))
    assert answers[0][1] < 2.0  # not the 5 s interval: nothing was committed before it


@pytest.mark.parametrize("value", ["-1", "10001", "soon"])
def test_an_interval_out_of_bounds_is_refused_with_the_bounds(value):
    with pytest.raises(InvalidConfig, match="delta.commit.interval.ms"):
        TopicConfig.from_mapping({"delta.commit.interval.ms": value})
    assert TopicConfig.from_mapping({"delta.commit.interval.ms": "10000"}).delta_commit_interval_ms
