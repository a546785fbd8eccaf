"""Thin executors: run one job's plan on one topic partition and commit it.

Each function plans from the partition's current snapshot (maintenance/plans.py, pure), does the I/O
the plan asks for, and commits with `DeltaPartitionLog.commit_maintenance`: one commit after the
planned snapshot that steps over the gateway's appends (they only touch the active segment,
which no plan includes). A commit that loses to another job is planned again from the new
snapshot, so a rerun after a crash, or two runs at once, finish the work without doing it twice.
Nothing here imports Spark: jobs/runner.py runs these functions in Spark tasks, a node's
scheduler (api/core/scheduled_jobs.py) and `--engine local` in-process (maintenance/jobs.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from storage_layout import paths
from storage_layout.log import DeltaPartitionLog, checkpoint_table, vacuum_table
from storage_layout.log.transaction_index import AbortedTransaction, aborted_mask
from storage_layout.maintenance import plans
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.records import AppTransaction
from storage_layout.schema import LOG_START_APP_ID

# The txn a key compaction commits with: its version is the end of the range it cleaned, so the
# next run knows where the dirty part starts (Kafka's cleaner checkpoint, kept in the table).
COMPACTION_APP_ID = "compaction"
COMMIT_ATTEMPTS_MAX = 5


@dataclass(frozen=True, slots=True)
class Unit:
    """One piece of a job's work: a topic partition (picklable, for Spark tasks)."""

    root: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a job did to one partition (or, with dry_run, would do)."""

    job: str
    topic: str
    partition: int
    lines: tuple[str, ...]  # the plan, described
    segments: int = 0  # deleted (retention) or rewritten (compaction, optimize)
    bytes_removed: int = 0
    records_removed: int = 0
    records_kept: int = 0
    files_deleted: int = 0  # vacuum
    elapsed_ms: int = 0
    committed: bool = False
    error: str | None = None  # the partition failed (jobs/runner.py reports it)


def run_retention(unit: Unit, *, now_ms: int, dry_run: bool) -> Outcome:
    """Delete the closed segments retention.ms / retention.bytes allow (a metadata-only
    delete of whole segments: their files are removed from the table, not rewritten)."""
    started = time.monotonic()
    log, config = _open(unit)
    for _ in range(COMMIT_ATTEMPTS_MAX):
        plan = plans.plan_retention(
            log.snapshot, config, topic=unit.topic, partition=unit.partition, now_ms=now_ms
        )
        if plan.empty or dry_run:
            break
        removes = [f for segment in plan.segments for f in segment.files]
        start = AppTransaction(LOG_START_APP_ID, plan.new_log_start_offset)
        if log.commit_maintenance(
            removes=removes, operation="DELETE", data_change=True, transactions=[start]
        ):
            return _retention_outcome(plan, started, committed=True)
    return _retention_outcome(plan, started, committed=False)


def _retention_outcome(plan: plans.RetentionPlan, started: float, *, committed: bool):
    return Outcome(
        job="retention",
        topic=plan.topic,
        partition=plan.partition,
        lines=tuple(plans.describe(plan)),
        segments=len(plan.segments),
        bytes_removed=plan.bytes_removed,
        records_removed=plan.records_removed,
        elapsed_ms=_elapsed_ms(started),
        committed=committed,
    )


def run_compact_keys(unit: Unit, *, now_ms: int, dry_run: bool) -> Outcome:
    """Keep the latest record per key in the cleanable closed segments (offsets unchanged,
    gaps allowed), drop tombstones older than delete.retention.ms, rewrite each changed
    segment as one file in offset order. log_start_offset does not move (only retention
    moves it)."""
    started = time.monotonic()
    log, config = _open(unit)
    removed = kept = changed = 0
    for _ in range(COMMIT_ATTEMPTS_MAX):
        cleaned_to = log.app_version(COMPACTION_APP_ID)
        snapshot = log.snapshot
        transactions = log.transaction_index(snapshot)
        plan = plans.plan_compact_keys(
            snapshot,
            config,
            topic=unit.topic,
            partition=unit.partition,
            now_ms=now_ms,
            first_dirty_offset=snapshot.log_start_offset if cleaned_to is None else cleaned_to,
            last_stable_offset=log.last_stable_offset(snapshot),
        )
        if plan.empty or dry_run:
            return _compaction_outcome(plan, started, (0, 0, 0), committed=False)
        aborted = transactions.aborted_between(0, plan.cleanable_end_offset)
        replacements, removes, (removed, kept, changed) = _compacted_segments(log, plan, aborted)
        # The log start is pinned: emptying the first segment must not move it (a consumer
        # positioned in the gap reads on from the next record, as in Kafka).
        txns = [
            AppTransaction(COMPACTION_APP_ID, plan.cleanable_end_offset),
            AppTransaction(LOG_START_APP_ID, log.snapshot.log_start_offset),
        ]
        if log.commit_maintenance(
            removes=removes,
            replacements=replacements,
            operation="COMPACT_KEYS",
            data_change=True,
            transactions=txns,
        ):
            return _compaction_outcome(plan, started, (removed, kept, changed), committed=True)
    return _compaction_outcome(plan, started, (removed, kept, changed), committed=False)


def _compacted_segments(log: DeltaPartitionLog, plan: plans.CompactionPlan, aborted=()):
    """(replacements, files to remove, (records removed, kept, segments changed))."""
    by_segment = [(segment, log.read_files(list(segment.files))) for segment in plan.segments]
    # The latest record per key is decided over the whole cleanable range at once.
    everything = pa.concat_tables([records for _, records in by_segment])
    keep = keep_mask(everything, tombstone_horizon_ms=plan.tombstone_horizon_ms, aborted=aborted)
    replacements, removes, removed, kept, changed, start = [], [], 0, 0, 0, 0
    for segment, records in by_segment:
        survivors = records.filter(keep.slice(start, records.num_rows)).sort_by("offset")
        start += records.num_rows
        kept += survivors.num_rows
        if survivors.num_rows == records.num_rows:
            continue  # nothing to drop here: leave the segment's files alone
        removed += records.num_rows - survivors.num_rows
        changed += 1
        removes += segment.files
        replacements.append((segment.base_offset, survivors))
    return replacements, removes, (removed, kept, changed)


def keep_mask(
    records: pa.Table, *, tombstone_horizon_ms: int, aborted: Sequence[AbortedTransaction] = ()
) -> pa.ChunkedArray:
    """Which records a key compaction keeps: the latest (highest offset) committed record of
    each key, unless it is a tombstone older than the horizon; records without a key are kept
    (there is nothing to compact them against).

    Transactions (FORMAT.md §14), as Kafka's cleaner: records of `aborted` transactions are
    removed and never count as a key's latest (an aborted write must not shadow a committed
    one); a marker is kept while a record of its transaction is, and until the horizon after
    that (a reader positioned before it must still learn the transaction's fate)."""
    hidden = aborted_mask(records, aborted) if aborted else pc.equal(records.column("offset"), -1)
    control = records.column("control")
    data = pc.and_(pc.invert(hidden), pc.is_null(control))
    keys_and_offsets = records.select(["key", "offset"]).filter(data)  # not the values
    keyed = keys_and_offsets.filter(pc.is_valid(keys_and_offsets.column("key")))
    latest = keyed.group_by("key").aggregate([("offset", "max")]).column("offset_max")
    is_latest = pc.is_in(records.column("offset"), value_set=latest.combine_chunks())
    horizon = pa.scalar(tombstone_horizon_ms * 1000, pa.timestamp("us", tz="UTC"))
    old = pc.less(records.column("timestamp"), horizon)
    expired_tombstone = pc.and_(pc.is_null(records.column("value")), old)
    keyless = pc.and_(pc.is_null(records.column("key")), data)
    kept_data = pc.and_(data, pc.or_(keyless, pc.and_(is_latest, pc.invert(expired_tombstone))))
    return pc.or_(kept_data, _markers_still_needed(records, kept_data, old))


def _markers_still_needed(records: pa.Table, kept_data, old) -> pa.Array:
    """True for the markers to keep: those with a kept record of their transaction (the
    producer's transactional records since its previous marker), or newer than the horizon.
    A pass over the transactional rows only, in offset order."""
    transactional = pc.fill_null(records.column("transactional"), False)
    needed = [False] * records.num_rows
    rows = pc.indices_nonzero(transactional).to_pylist()
    if not rows:
        return pa.array(needed)
    columns = records.select(["offset", "producer_id", "control"]).take(rows).to_pydict()
    indices = pa.array(rows, pa.int64())
    kept = pc.take(kept_data, indices).to_pylist()
    recent = pc.invert(pc.take(old, indices)).to_pylist()
    by_offset = sorted(range(len(rows)), key=lambda i: columns["offset"][i])
    kept_since_marker: dict[int, bool] = {}
    for i in by_offset:
        producer = columns["producer_id"][i]
        if columns["control"][i] is None:
            kept_since_marker[producer] = kept_since_marker.get(producer, False) or kept[i]
            continue
        needed[rows[i]] = kept_since_marker.pop(producer, False) or recent[i]
    return pa.array(needed)


def _compaction_outcome(plan, started: float, counts: tuple[int, int, int], *, committed: bool):
    removed, kept, changed = counts
    return Outcome(
        job="compact-keys",
        topic=plan.topic,
        partition=plan.partition,
        lines=tuple(plans.describe(plan)),
        segments=changed,
        records_removed=removed,
        records_kept=kept,
        elapsed_ms=_elapsed_ms(started),
        committed=committed,
    )


def run_optimize_files(unit: Unit, *, now_ms: int, dry_run: bool) -> Outcome:
    """Rewrite each closed segment with several files as few files in offset order (no
    record changes: the gateway steps over it), then checkpoint the table."""
    started = time.monotonic()
    log, _ = _open(unit)
    rewritten = 0
    for _ in range(COMMIT_ATTEMPTS_MAX):
        plan = plans.plan_optimize_files(log.snapshot, topic=unit.topic, partition=unit.partition)
        if plan.empty or dry_run:
            break
        removes, replacements = _optimized_segments(log, plan)
        if log.commit_maintenance(
            removes=removes, replacements=replacements, operation="OPTIMIZE", data_change=False
        ):
            rewritten = len(plan.segments)
            break
    if not dry_run:
        _checkpoint(unit)
    return Outcome(
        job="optimize-files",
        topic=unit.topic,
        partition=unit.partition,
        lines=tuple(plans.describe(plan)),
        segments=rewritten,
        elapsed_ms=_elapsed_ms(started),
        committed=rewritten > 0,
    )


def _optimized_segments(log: DeltaPartitionLog, plan: plans.OptimizePlan):
    removes, replacements = [], []
    for segment, pieces in zip(plan.segments, plan.output_file_counts, strict=True):
        records = log.read_files(list(segment.files)).sort_by("offset")
        rows_per_piece = math.ceil(records.num_rows / pieces)
        for start in range(0, records.num_rows, rows_per_piece):
            replacements.append((segment.base_offset, records.slice(start, rows_per_piece)))
        removes += segment.files
    return removes, replacements


def _checkpoint(unit: Unit) -> None:
    """A checkpoint and Delta's own log cleanup, for partitions no gateway keeps (idle)."""
    checkpoint_table(paths.partition_table_uri(unit.root, unit.topic, unit.partition))


def run_vacuum(unit: Unit, *, retention_ms: int, dry_run: bool) -> Outcome:
    """Delete data files the table removed longer than `retention_ms` ago (never a file a
    live version references, never one not yet committed: lite vacuum only looks at files
    the log removed)."""
    started = time.monotonic()
    uri = paths.partition_table_uri(unit.root, unit.topic, unit.partition)
    plan = plans.plan_vacuum(uri, retention_ms=retention_ms, dry_run=dry_run)
    deleted = vacuum_table(
        uri, retention_hours=math.ceil(plan.retention_ms / 3_600_000), dry_run=plan.dry_run
    )
    return Outcome(
        job="vacuum",
        topic=unit.topic,
        partition=unit.partition,
        lines=tuple(plans.describe(plan)),
        files_deleted=len(deleted),
        elapsed_ms=_elapsed_ms(started),
        committed=bool(deleted) and not dry_run,
    )


def _open(unit: Unit):
    config = TopicCatalog(unit.root).topic(unit.topic).config
    uri = paths.partition_table_uri(unit.root, unit.topic, unit.partition)
    return DeltaPartitionLog.open(uri), config


def _elapsed_ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
