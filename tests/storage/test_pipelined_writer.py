"""PartitionWriter's pipelined group commits of plain batches (no producer ids, no txn) on real
Delta tables: the next group's file is written while the previous commit is in flight, and
neither a failed commit nor another writer's commit in between loses, duplicates or reorders
an acknowledged record. Small-file merges ride on the appends' commits."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from deltalake import DeltaTable

from api.core import writer as writer_module
from api.core.writer import HOUSEKEEPING_EVERY_COMMITS, CommitLimits, PartitionWriter
from storage_layout.errors import StorageUnavailable
from storage_layout.log import MERGE_FILES_MIN, DeltaPartitionLog
from storage_layout.log.housekeeping import MERGE_TIER_FACTOR
from storage_layout.log.snapshot import DataFile, in_memory
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig

LIMITS = CommitLimits(linger_ms=0, records_max=10_000, bytes_max=10**8)
CONFIG = TopicConfig()


@pytest.fixture
def table_uri(tmp_path) -> str:
    uri = str(tmp_path / "t" / "0")
    DeltaPartitionLog.create(uri)
    return uri


def stored(uri: str) -> list[tuple[int, bytes]]:
    table = DeltaTable(uri).to_pyarrow_table(columns=["offset", "value"])
    return sorted(zip(*table.to_pydict().values(), strict=True))


def run(log: DeltaPartitionLog, scenario, executor_type=ThreadPoolExecutor, **options):
    async def main():
        with executor_type(4) as executor:
            writer = PartitionWriter(
                log, config=lambda: CONFIG, executor=executor, limits=LIMITS, **options
            )
            try:
                return await scenario(writer)
            finally:
                await writer.close()

    return asyncio.run(main())


def one(value: str) -> list[NewRecord]:
    return [NewRecord(None, value.encode())]


async def produce_all(writer: PartitionWriter, count: int, spacing_s: float = 0.0):
    futures = []
    for index in range(count):
        futures.append(writer.submit(one(f"v{index}"), 2))
        if spacing_s:
            await asyncio.sleep(spacing_s)
    return await asyncio.gather(*futures, return_exceptions=True)


def test_acknowledged_offsets_are_the_stored_ones_in_submission_order(table_uri):
    log = DeltaPartitionLog.open(table_uri)
    acks = run(log, lambda writer: produce_all(writer, 300, spacing_s=0.0005))
    offsets = [ack.base_offset for ack in acks]
    assert offsets == list(range(300))
    assert stored(table_uri) == [(i, f"v{i}".encode()) for i in range(300)]


def test_the_next_file_is_written_while_a_commit_is_in_flight(table_uri, monkeypatch):
    """With the first commit held, the second group is staged (its file written) anyway."""
    log = DeltaPartitionLog.open(table_uri)
    release, second_staged = threading.Event(), threading.Event()
    original_commit, original_stage = log.commit_staged, log.stage_append
    stages = []

    def held_commit(staged, **kwargs):
        if staged.base_offset == 0:
            assert release.wait(10)
        return original_commit(staged, **kwargs)

    def counted_stage(*args, **kwargs):
        stages.append(kwargs.get("after"))
        if len(stages) == 2:
            second_staged.set()
        return original_stage(*args, **kwargs)

    monkeypatch.setattr(log, "commit_staged", held_commit)
    monkeypatch.setattr(log, "stage_append", counted_stage)

    async def scenario(writer):
        first = writer.submit(one("a"), 1)
        await asyncio.sleep(0.05)
        second = writer.submit(one("b"), 1)
        staged_meanwhile = await asyncio.get_running_loop().run_in_executor(
            None, second_staged.wait, 5
        )
        release.set()
        return staged_meanwhile, await first, await second

    # As on an object store: a lone group is staged, then committed, in two trips.
    staged_meanwhile, first, second = run(log, scenario, alone_in_one_trip=False)
    assert staged_meanwhile, "the second group waited for the first commit"
    assert stages[1] is not None and stages[1].base_offset == 0  # planned after the first
    assert (first.base_offset, second.base_offset) == (0, 1)
    assert stored(table_uri) == [(0, b"a"), (1, b"b")]


class CountingExecutor(ThreadPoolExecutor):
    """A thread pool that counts the trips handed to it."""

    trips = 0

    def submit(self, *args, **kwargs):
        CountingExecutor.trips += 1
        return super().submit(*args, **kwargs)


@pytest.mark.parametrize(("alone_in_one_trip", "trips_per_commit"), [(None, 1), (False, 2)])
def test_a_lone_group_takes_one_trip_to_the_storage_threads_on_a_local_disk(
    table_uri, alone_in_one_trip, trips_per_commit
):
    """A producer waiting for each acknowledgement: on a local disk each commit is one trip
    (stage and commit together); pipelined, as on an object store, it is two."""
    log = DeltaPartitionLog.open(table_uri)
    commits = 20  # fewer than HOUSEKEEPING_EVERY_COMMITS: no housekeeping trip

    async def one_at_a_time(writer):
        CountingExecutor.trips = 0
        return [await writer.submit(one(f"v{index}"), 1) for index in range(commits)]

    options = {} if alone_in_one_trip is None else {"alone_in_one_trip": alone_in_one_trip}
    acks = run(log, one_at_a_time, CountingExecutor, **options)
    assert CountingExecutor.trips == commits * trips_per_commit
    assert [ack.base_offset for ack in acks] == list(range(commits))
    assert stored(table_uri) == [(i, f"v{i}".encode()) for i in range(commits)]


def test_a_failed_commit_fails_only_its_group_and_the_next_is_planned_again(table_uri, monkeypatch):
    log = DeltaPartitionLog.open(table_uri)
    original_commit = log.commit_staged
    failed = []

    def failing_once(staged, **kwargs):
        if staged.base_offset == 0 and not failed:
            failed.append(staged)
            raise StorageUnavailable("the store is down")
        return original_commit(staged, **kwargs)

    monkeypatch.setattr(log, "commit_staged", failing_once)
    results = run(log, lambda writer: produce_all(writer, 50, spacing_s=0.001))
    errors = [r for r in results if isinstance(r, Exception)]
    acks = [r for r in results if not isinstance(r, Exception)]
    assert errors and all(isinstance(e, StorageUnavailable) for e in errors)
    # The acknowledged records are exactly the stored ones, densely from 0, in order.
    values = {ack.base_offset: f"v{results.index(ack)}".encode() for ack in acks}
    assert stored(table_uri) == sorted(values.items())
    assert sorted(values) == list(range(len(acks)))


def test_another_writers_commit_in_between_is_planned_around(table_uri, monkeypatch):
    """A direct append (a Spark task) lands between two pipelined groups: the staged group's
    offsets are taken, so it is planned again after it; nothing is lost or duplicated."""
    log = DeltaPartitionLog.open(table_uri)
    other = DeltaPartitionLog.open(table_uri)
    original_commit = log.commit_staged
    intruded = []

    def intruding(staged, **kwargs):
        if staged.base_offset >= 5 and not intruded:  # whatever the grouping
            intruded.append(other.append(one("foreign"), config=CONFIG))
        return original_commit(staged, **kwargs)

    monkeypatch.setattr(log, "commit_staged", intruding)
    acks = run(log, lambda writer: produce_all(writer, 40, spacing_s=0.001))
    assert not [a for a in acks if isinstance(a, Exception)]
    rows = stored(table_uri)
    assert [offset for offset, _ in rows] == list(range(41))
    by_offset = dict(rows)
    for index, ack in enumerate(acks):
        assert by_offset[ack.base_offset] == f"v{index}".encode()
    assert by_offset[intruded[0].base_offset] == b"foreign"


def test_a_small_file_merge_rides_on_the_next_append(table_uri):
    """Housekeeping only writes the merged file; the writer's next append commits it in the
    same Delta commit (no second commit racing the appends), which delta-rs reads."""
    log = DeltaPartitionLog.open(table_uri)
    for index in range(MERGE_FILES_MIN):
        log.append(one(f"v{index}"), config=CONFIG)
    before = log.snapshot.table_version
    assert log.housekeeping() == MERGE_FILES_MIN
    assert log.merge_pending and log.snapshot.table_version == before  # nothing committed
    log.append(one("after"), config=CONFIG)
    assert not log.merge_pending
    assert log.snapshot.table_version == before + 1  # one commit: the append and the merge
    assert len(log.snapshot.files) == 2
    reopened = DeltaPartitionLog.open(table_uri)
    assert [f.path for f in reopened.snapshot.files] == [f.path for f in log.snapshot.files]
    expected = [(i, f"v{i}".encode()) for i in range(MERGE_FILES_MIN)]
    assert stored(table_uri) == [*expected, (MERGE_FILES_MIN, b"after")]
    history = DeltaTable(table_uri).history(1)[0]
    assert history["operation"] == "WRITE"


def test_a_pending_merge_is_committed_alone_when_the_writer_goes_quiet(table_uri):
    log = DeltaPartitionLog.open(table_uri)

    async def scenario(writer):
        acks = await produce_all(writer, MERGE_FILES_MIN + HOUSEKEEPING_EVERY_COMMITS)
        for _ in range(100):  # housekeeping runs in the background, then the idle commit
            await asyncio.sleep(0.05)
            if len(log.snapshot.files) < MERGE_FILES_MIN:
                break
        return acks

    acks = run(log, scenario)
    assert len(acks) == MERGE_FILES_MIN + HOUSEKEEPING_EVERY_COMMITS
    assert not log.merge_pending
    assert len(DeltaPartitionLog.open(table_uri).snapshot.files) < MERGE_FILES_MIN
    assert [offset for offset, _ in stored(table_uri)] == list(range(len(acks)))


def test_a_merge_whose_files_went_is_dropped(table_uri):
    """Retention removed one of the merge's files before the next append: the merge is not
    committed (its file deleted), the append is."""
    log = DeltaPartitionLog.open(table_uri)
    for index in range(MERGE_FILES_MIN):
        log.append(one(f"v{index}"), config=CONFIG)
    assert log.housekeeping() == MERGE_FILES_MIN
    first = log.snapshot.files[0]
    assert log.commit_maintenance(removes=[first], operation="DELETE", data_change=True)
    log.append(one("after"), config=CONFIG)
    assert not log.merge_pending
    assert len(log.snapshot.files) == MERGE_FILES_MIN  # 31 left + the new one
    assert stored(table_uri)[0][0] == 1


def lingering_writer(log: DeltaPartitionLog, executor, linger_ms: int) -> PartitionWriter:
    limits = CommitLimits(linger_ms=linger_ms, records_max=10_000, bytes_max=10**8)
    return PartitionWriter(log, config=lambda: CONFIG, executor=executor, limits=limits)


def test_requests_arriving_together_share_one_commit(table_uri):
    log = DeltaPartitionLog.open(table_uri)
    before = log.snapshot.table_version

    async def main():
        with ThreadPoolExecutor(2) as executor:
            writer = lingering_writer(log, executor, linger_ms=200)
            try:
                first = writer.submit([NewRecord(None, b"first")], 5)
                await asyncio.sleep(0)
                pending = [writer.submit([NewRecord(None, b"%d" % i)], 1) for i in range(3)]
                return await asyncio.gather(first, *pending)
            finally:
                await writer.close()

    acks = asyncio.run(main())
    assert [ack.base_offset for ack in acks] == [0, 1, 2, 3]
    # The first, alone after a quiet spell, was committed at once; the three that followed it
    # closely went together in the next commit.
    assert log.snapshot.table_version == before + 2


def test_a_request_after_a_quiet_spell_is_not_held_by_the_linger(table_uri):
    """A producer that waits for each acknowledgement sends nothing during the linger: a
    request that comes alone is committed without it (here a linger of a minute)."""
    log = DeltaPartitionLog.open(table_uri)

    async def main():
        with ThreadPoolExecutor(2) as executor:
            writer = lingering_writer(log, executor, linger_ms=60_000)
            try:
                pending = writer.submit([NewRecord(None, b"alone")], 5)
                return await asyncio.wait_for(pending, timeout=20)
            finally:
                await writer.close()

    assert asyncio.run(main()).base_offset == 0


def merged_run(log: DeltaPartitionLog, commits: int, first: int) -> None:
    for index in range(first, first + commits):
        log.append(one(f"v{index}"), config=CONFIG)
    assert log.housekeeping() > 0
    log.commit_pending_merge()


def test_a_merge_takes_a_merged_files_records_from_the_tail(table_uri):
    """Size tiers merge a merged file again; while the tail holds the commits it was made
    of, the merge assembles its records from them instead of reading it back. Proved by
    emptying the merged file on disk first: the next merge still writes every record."""
    log = DeltaPartitionLog.open(table_uri)
    merged_run(log, MERGE_FILES_MIN, 0)
    merged = log.snapshot.files[0]
    assert merged.num_records == MERGE_FILES_MIN
    with open(f"{table_uri}/{merged.path}", "wb"):
        pass  # its bytes are gone: a read of it would fail
    after = MERGE_FILES_MIN * MERGE_TIER_FACTOR  # what it takes to merge it again
    merged_run(log, after, MERGE_FILES_MIN)
    files = log.snapshot.files
    assert len(files) == 1 and files[0].num_records == MERGE_FILES_MIN + after
    expected = [(i, f"v{i}".encode()) for i in range(MERGE_FILES_MIN + after)]
    assert stored(table_uri) == expected


def test_a_compacted_file_is_never_taken_from_the_tail(table_uri):
    """A file whose offsets have gaps (key compaction kept some records) is not the commits
    that start at its first offset, whatever its record count."""
    log = DeltaPartitionLog.open(table_uri)
    for index in range(4):
        log.append(one(f"v{index}"), config=CONFIG)
    chunks = log.snapshot.tail_records()
    whole = DataFile("x.parquet", 0, 0, 1, 2, 10, 0)
    assert in_memory(chunks, whole).column("value").to_pylist() == [b"v0", b"v1"]
    gapped = DataFile("y.parquet", 0, 0, 3, 2, 10, 0)  # offsets 0 and 3 kept
    assert in_memory(chunks, gapped) is None
    beyond = DataFile("z.parquet", 0, 2, 4, 3, 10, 0)  # offset 4 is not in the tail
    assert in_memory(chunks, beyond) is None


def test_housekeeping_is_overdue_once_half_the_tail_was_committed(tmp_path):
    uri = str(tmp_path / "t" / "0")
    DeltaPartitionLog.create(uri)
    log = DeltaPartitionLog.open(uri, tail_records_max=10)
    assert not log.housekeeping_overdue()  # no pass yet: the writer's own count decides
    log.housekeeping()
    log.append([NewRecord(None, b"x")] * 4, config=CONFIG)
    assert not log.housekeeping_overdue()
    log.append([NewRecord(None, b"x")] * 1, config=CONFIG)
    assert log.housekeeping_overdue()  # 5 of a 10-record tail
    log.housekeeping()
    assert not log.housekeeping_overdue()


def test_housekeeping_comes_early_when_the_tail_turns_over(tmp_path, monkeypatch):
    """At a high commit rate the writer does not wait HOUSEKEEPING_INTERVAL_MS between passes
    once half the in-memory tail was committed since the last one (the merge then still finds
    its files' records in memory). With the interval an hour, only that rule can start the
    passes after the first: without them the small files would pile up."""
    monkeypatch.setattr(writer_module, "HOUSEKEEPING_INTERVAL_MS", 3_600_000)
    uri = str(tmp_path / "t" / "0")
    DeltaPartitionLog.create(uri)
    log = DeltaPartitionLog.open(uri, tail_records_max=2 * HOUSEKEEPING_EVERY_COMMITS)
    commits = 8 * HOUSEKEEPING_EVERY_COMMITS

    async def scenario(writer):
        for index in range(commits):
            await writer.submit(one(f"v{index}"), 2)
        for _ in range(100):  # the last pass's merge, committed alone when idle
            await asyncio.sleep(0.05)
            if not log.merge_pending and len(log.snapshot.files) < 3 * MERGE_FILES_MIN:
                break

    run(log, scenario)
    assert len(log.snapshot.files) < 3 * MERGE_FILES_MIN  # merged as they came, not once
    assert [offset for offset, _ in stored(uri)] == list(range(commits))


def test_the_nodes_housekeeping_passes_share_their_slots(tmp_path):
    """Writers sharing one housekeeping slot never housekeep at once (the node keeps a storage
    thread for produces), and every pass still runs: each partition gets its merge."""
    logs = []
    for partition in range(3):
        uri = str(tmp_path / "t" / str(partition))
        DeltaPartitionLog.create(uri)
        logs.append(DeltaPartitionLog.open(uri))
    running, overlaps, passes = [0], [], []
    lock = threading.Lock()

    def observed(log: DeltaPartitionLog):
        housekeeping = log.housekeeping

        def wrapped(*args):
            with lock:
                running[0] += 1
                overlaps.append(running[0])
            try:
                threading.Event().wait(0.05)  # long enough for the others to try
                return housekeeping(*args)
            finally:
                with lock:
                    running[0] -= 1
                passes.append(log.table_uri)

        log.housekeeping = wrapped

    for log in logs:
        observed(log)

    async def main():
        slots = asyncio.Semaphore(1)
        with ThreadPoolExecutor(4) as executor:
            writers = [
                PartitionWriter(
                    log,
                    config=lambda: CONFIG,
                    executor=executor,
                    limits=LIMITS,
                    housekeeping_slots=slots,
                )
                for log in logs
            ]
            try:
                for index in range(HOUSEKEEPING_EVERY_COMMITS):
                    await asyncio.gather(*(w.submit(one(f"v{index}"), 1) for w in writers))
            finally:
                for writer in writers:
                    await writer.close()

    asyncio.run(main())
    assert sorted(passes) == sorted(log.table_uri for log in logs)
    assert max(overlaps) == 1
