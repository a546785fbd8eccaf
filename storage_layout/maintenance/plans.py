"""Maintenance plans: what retention, key compaction, file optimization and VACUUM would change.

Every function here is pure: it takes a partition's `LogSnapshot`, its `TopicConfig` and the
clock (`now_ms`) and returns a frozen plan, without I/O, Spark or deltalake calls. Executors
(`jobs/*.py`) carry a plan out under the partition's leadership (FORMAT.md §7) and must commit on
top of `table_version`, the snapshot the plan was made from.

The rules are Kafka's (`UnifiedLog.deleteOldSegments`, `LogCleanerManager.cleanableOffsets`)
applied to lakelog segments (FORMAT.md §4): one segment is the set of live files under one
`segment=<base offset>` directory, the highest one is active, the others are closed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import takewhile
from typing import TYPE_CHECKING

from storage_layout.errors import CorruptPartition
from storage_layout.log.checkpoint import REMOVED_FILE_GRACE_MS

if TYPE_CHECKING:
    from storage_layout.log import DataFile, LogSnapshot
    from storage_layout.topic_config import TopicConfig

RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
LOG_START = "log-start-offset"  # below the log start (Kafka's DeleteRecords)
OPTIMIZE_TARGET_FILE_BYTES = 128 * 1024 * 1024
# Below it a reader planned on an older version could miss a file that VACUUM deleted under it.
VACUUM_RETENTION_MS_MIN = REMOVED_FILE_GRACE_MS


# ---- segments --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Segment:
    """One segment of a partition: its live files, in offset order.

    Invariant (checked by `segments`): base_offset <= min_offset <= max_offset, and a segment's
    offsets all lie below the next segment's, so deleting a prefix of segments deletes a prefix
    of offsets. `min_offset` exceeds `base_offset` once compaction removed the first records.
    """

    base_offset: int  # the `segment` partition value
    files: tuple[DataFile, ...]
    min_offset: int
    max_offset: int
    size_bytes: int  # Parquet bytes of its files
    num_records: int
    # Newest record timestamp over the files; None when any file's statistics lack it.
    max_timestamp_ms: int | None
    active: bool

    @property
    def newest_modification_time_ms(self) -> int:
        return max(f.modification_time_ms for f in self.files)

    @property
    def largest_timestamp_ms(self) -> int:
        """The time retention.ms and min.compaction.lag.ms compare, as Kafka's
        `LogSegment.largestTimestamp`: the newest record timestamp, or, when a file's statistics
        do not say (written by another tool), the newest file modification time. Known record
        timestamps still count then, so the fallback never makes a segment look older than a
        record it holds (retention deletes later rather than earlier)."""
        if self.max_timestamp_ms is not None:
            return self.max_timestamp_ms
        known = [f.max_timestamp_ms for f in self.files if f.max_timestamp_ms is not None]
        return max([self.newest_modification_time_ms, *known])


def segments(snapshot: LogSnapshot) -> tuple[Segment, ...]:
    """The snapshot's segments by ascending base offset; the last one is active.

    Raises:
        CorruptPartition: a file lies below its segment's base offset, or two segments' offset
            ranges interleave (deleting a prefix of segments would then punch a hole).
    """
    files_by_base: dict[int, list[DataFile]] = {}
    for data_file in snapshot.files:  # sorted by min_offset, so each list is in offset order
        files_by_base.setdefault(data_file.segment, []).append(data_file)
    bases = sorted(files_by_base)
    log = tuple(_segment(base, files_by_base[base], active=base == bases[-1]) for base in bases)
    _check_offsets(log)
    return log


def _segment(base_offset: int, files: list[DataFile], *, active: bool) -> Segment:
    timestamps = [f.max_timestamp_ms for f in files]
    return Segment(
        base_offset=base_offset,
        files=tuple(files),
        min_offset=min(f.min_offset for f in files),
        max_offset=max(f.max_offset for f in files),
        size_bytes=sum(f.size_bytes for f in files),
        num_records=sum(f.num_records for f in files),
        max_timestamp_ms=None if None in timestamps else max(timestamps),
        active=active,
    )


def _check_offsets(log: tuple[Segment, ...]) -> None:
    for previous, segment in zip((None, *log), log, strict=False):
        if segment.min_offset < segment.base_offset:
            raise CorruptPartition(
                f"Segment {segment.base_offset} holds offset {segment.min_offset}, "
                f"below its base offset."
            )
        if previous is not None and previous.max_offset >= segment.min_offset:
            raise CorruptPartition(
                f"Segments {previous.base_offset} (offsets up to {previous.max_offset}) and "
                f"{segment.base_offset} (from {segment.min_offset}) overlap."
            )


def _has_policy(config: TopicConfig, policy: str) -> bool:
    return policy in (part.strip() for part in config.cleanup_policy.split(","))


# ---- retention ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """Closed segments to delete (`DELETE WHERE segment < k`, metadata-only)."""

    topic: str
    partition: int
    table_version: int
    segments: tuple[Segment, ...]  # a prefix of the log, oldest first; never the active one
    reasons: tuple[str, ...]  # per segment: RETENTION_MS or RETENTION_BYTES
    new_log_start_offset: int  # first offset left after the delete (the HW if nothing is)
    bytes_removed: int
    records_removed: int

    @property
    def empty(self) -> bool:
        return not self.segments


def plan_retention(
    snapshot: LogSnapshot, config: TopicConfig, *, topic: str, partition: int, now_ms: int
) -> RetentionPlan:
    """Kafka's retention: which closed segments `retention.ms` and `retention.bytes` delete.

    Only when `cleanup.policy` contains "delete". As Kafka, time is checked first, then size on
    what time left: retention.ms deletes closed segments from the oldest while their newest
    record is more than `retention_ms` old (stopping at the first that is not: the result is a
    prefix); retention.bytes then takes `diff = log size - retention_bytes` (the log size counts
    the active segment) and deletes the oldest remaining closed segments while
    `diff - segment size >= 0`. -1 disables either rule.

    The active segment is never deleted, however old or large (Kafka rolls it first; lakelog
    opens a new segment only with an append, so the active one goes once an append rolls it).
    """
    log = segments(snapshot)
    closed = log[:-1]
    # Segments wholly below the log start (moved by DeleteRecords) go first, whatever the
    # policy, as Kafka deletes segments below its log start offset.
    reasons: list[str] = [LOG_START] * _below_log_start(closed, snapshot.log_start_offset)
    if _has_policy(config, "delete"):
        reasons += [RETENTION_MS] * _retention_ms_breached(
            closed[len(reasons) :], config.retention_ms, now_ms
        )
        size_left_bytes = sum(s.size_bytes for s in log[len(reasons) :])
        breached = _retention_bytes_breached(
            closed[len(reasons) :], size_left_bytes, config.retention_bytes
        )
        reasons += [RETENTION_BYTES] * breached
    deleted, kept = closed[: len(reasons)], log[len(reasons) :]
    return RetentionPlan(
        topic=topic,
        partition=partition,
        table_version=snapshot.table_version,
        segments=deleted,
        reasons=tuple(reasons),
        # Never below the current start: DeleteRecords may have moved it into a kept segment.
        new_log_start_offset=max(
            snapshot.log_start_offset, kept[0].min_offset if kept else snapshot.high_watermark
        ),
        bytes_removed=sum(s.size_bytes for s in deleted),
        records_removed=sum(s.num_records for s in deleted),
    )


def _below_log_start(closed: tuple[Segment, ...], log_start_offset: int) -> int:
    """How many of the oldest closed segments hold only offsets below the log start."""
    return sum(1 for _ in takewhile(lambda s: s.max_offset < log_start_offset, closed))


def _retention_ms_breached(closed: tuple[Segment, ...], retention_ms: int, now_ms: int) -> int:
    """How many of the oldest closed segments are past retention.ms (Kafka's predicate
    `now - largestTimestamp > retentionMs`)."""
    if retention_ms < 0:
        return 0
    expired = takewhile(lambda s: now_ms - s.largest_timestamp_ms > retention_ms, closed)
    return sum(1 for _ in expired)


def _retention_bytes_breached(
    closed: tuple[Segment, ...], log_size_bytes: int, retention_bytes: int
) -> int:
    """How many of the oldest closed segments Kafka's size rule deletes: while the log stays
    at or above retention.bytes without the segment."""
    if retention_bytes < 0:
        return 0
    diff_bytes, count = log_size_bytes - retention_bytes, 0
    for segment in closed:
        if diff_bytes - segment.size_bytes < 0:
            break
        diff_bytes -= segment.size_bytes
        count += 1
    return count


# ---- key compaction ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """Closed segments to rewrite keeping the latest record per key (Kafka's log cleaner).

    The latest record of a key is decided over `segments` only: records at or above
    `cleanable_end_offset` (the active segment, or segments newer than min.compaction.lag.ms)
    are not looked at, as Kafka's offset map covers the dirty section only up to the first
    uncleanable offset. A key overwritten there keeps its older record here until a later run.
    Tombstones (value NULL) that are the latest record of their key are dropped when their
    timestamp is below `tombstone_horizon_ms`, kept otherwise (consumers must see them).
    """

    topic: str
    partition: int
    table_version: int
    segments: tuple[Segment, ...]  # closed, cleanable, oldest first; clean ones are recopied
    cleanable_end_offset: int  # a segment base offset (or the HW); records from it are kept
    first_dirty_offset: int  # records below were compacted before (reset to the log start if
    # the given one lies outside the log, as Kafka resets an invalid cleaner checkpoint)
    tombstone_horizon_ms: int  # now_ms - delete.retention.ms

    @property
    def empty(self) -> bool:
        return not self.segments


def plan_compact_keys(
    snapshot: LogSnapshot,
    config: TopicConfig,
    *,
    topic: str,
    partition: int,
    now_ms: int,
    first_dirty_offset: int,
    last_stable_offset: int | None = None,
) -> CompactionPlan:
    """Kafka's cleanable range: from the log start to the first uncleanable segment.

    Only when `cleanup.policy` contains "compact". The first uncleanable offset is the active
    segment's base offset, or, when min.compaction.lag.ms > 0, the base offset of the first
    segment at or after `first_dirty_offset` whose newest record is newer than
    `now_ms - min_compaction_lag_ms`, or the base offset of the segment holding
    `last_stable_offset` (an open transaction's records are not cleaned: it may still abort,
    as Kafka's cleaner stops at the first unstable offset), whichever is lowest. The plan is
    empty when that leaves no dirty record (`cleanable_end_offset <= first_dirty_offset`);
    otherwise it rewrites every cleanable segment, already-cleaned ones too, as Kafka recopies
    them: a key overwritten in the dirty part loses its record in the clean part. After the
    executor commits, `cleanable_end_offset` is the next run's `first_dirty_offset`.
    """
    first_dirty = _first_dirty_offset(snapshot, first_dirty_offset)
    log = segments(snapshot)
    end = first_dirty
    if _has_policy(config, "compact"):
        uncleanable = _first_uncleanable_offset(log, first_dirty, config, now_ms)
        unstable = _segment_holding(log, last_stable_offset)
        if unstable is not None:
            uncleanable = unstable if uncleanable is None else min(uncleanable, unstable)
        end = max(first_dirty, snapshot.high_watermark if uncleanable is None else uncleanable)
    cleanable = tuple(s for s in log[:-1] if s.base_offset < end) if end > first_dirty else ()
    return CompactionPlan(
        topic=topic,
        partition=partition,
        table_version=snapshot.table_version,
        segments=cleanable,
        cleanable_end_offset=end,
        first_dirty_offset=first_dirty,
        tombstone_horizon_ms=now_ms - config.delete_retention_ms,
    )


def _first_dirty_offset(snapshot: LogSnapshot, first_dirty_offset: int) -> int:
    """Kafka resets a cleaner checkpoint below the log start (retention deleted past it) or
    above the log end (the log was recreated) to the log start: all of the log is dirty."""
    start, end = snapshot.log_start_offset, snapshot.high_watermark
    return first_dirty_offset if start <= first_dirty_offset <= end else start


def _segment_holding(log: tuple[Segment, ...], offset: int | None) -> int | None:
    """The base offset of the segment `offset` falls in: the last one starting at or below it
    (the first one if none does; None without an offset or segments)."""
    if offset is None or not log:
        return None
    at_or_below = [s.base_offset for s in log if s.base_offset <= offset]
    return at_or_below[-1] if at_or_below else log[0].base_offset


def _first_uncleanable_offset(
    log: tuple[Segment, ...], first_dirty: int, config: TopicConfig, now_ms: int
) -> int | None:
    """None for an empty log. The lag is checked only from the segment holding `first_dirty`
    on, as Kafka's `nonActiveLogSegmentsFrom(firstDirtyOffset)`: clean segments were cleanable
    when they were cleaned. With a lag of 0 no timestamp is checked (a future CreateTime
    does not block cleaning), as in Kafka."""
    if not log:
        return None
    if config.min_compaction_lag_ms > 0:
        newest_cleanable_ms = now_ms - config.min_compaction_lag_ms
        for segment, following in zip(log, log[1:], strict=False):
            dirty = following.base_offset > first_dirty
            if dirty and segment.largest_timestamp_ms > newest_cleanable_ms:
                return segment.base_offset
    return log[-1].base_offset


# ---- file optimization -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OptimizePlan:
    """Closed segments whose files to rewrite with the same records in offset order, as
    `output_file_counts[i]` files of about `target_file_bytes` (`dataChange=false`, no txn)."""

    topic: str
    partition: int
    table_version: int
    segments: tuple[Segment, ...]  # closed, oldest first
    target_file_bytes: int
    output_file_counts: tuple[int, ...]  # per segment: ceil(size / target_file_bytes)

    @property
    def empty(self) -> bool:
        return not self.segments


def output_file_count(segment: Segment, target_file_bytes: int) -> int:
    """Files a rewrite of `segment` writes: ceil(size / target), at least one."""
    return max(1, math.ceil(segment.size_bytes / target_file_bytes))


def plan_optimize_files(
    snapshot: LogSnapshot,
    *,
    topic: str,
    partition: int,
    target_file_bytes: int = OPTIMIZE_TARGET_FILE_BYTES,
) -> OptimizePlan:
    """Closed segments with 2+ files whose rewrite would leave fewer files: more files than
    `output_file_count` (so a segment already made of target-sized files is left alone).

    Never the active segment: the gateway's housekeeping merges its small files while appends
    go on (FORMAT.md §6b), and a rewrite here would race it.

    Raises:
        ValueError: `target_file_bytes` is not positive.
    """
    if target_file_bytes <= 0:
        raise ValueError(f"target_file_bytes must be positive, got {target_file_bytes}.")
    chosen = tuple(
        s for s in segments(snapshot)[:-1] if len(s.files) > output_file_count(s, target_file_bytes)
    )
    return OptimizePlan(
        topic=topic,
        partition=partition,
        table_version=snapshot.table_version,
        segments=chosen,
        target_file_bytes=target_file_bytes,
        output_file_counts=tuple(output_file_count(s, target_file_bytes) for s in chosen),
    )


# ---- vacuum ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VacuumPlan:
    table_uri: str
    retention_ms: int  # files removed from the table longer ago than this are deleted
    dry_run: bool  # list the files only


def plan_vacuum(
    table_uri: str,
    *,
    retention_ms: int,
    dry_run: bool,
    minimum_retention_ms: int = VACUUM_RETENTION_MS_MIN,
) -> VacuumPlan:
    """VACUUM of `table_uri` deleting files removed from the table over `retention_ms` ago.

    Raises:
        ValueError: `retention_ms` is below `minimum_retention_ms` (or negative).
    """
    minimum_ms = max(0, minimum_retention_ms)
    if retention_ms < minimum_ms:
        raise ValueError(
            f"VACUUM retention of {retention_ms} ms is below the minimum of {minimum_ms} ms "
            f"({_format_duration_ms(minimum_ms)}): a reader planned on an older table version "
            f"(a stream's split, a gateway's fetch before it reloads) could miss a file it "
            f"still needs. Use a retention of at least {minimum_ms} ms."
        )
    return VacuumPlan(table_uri=table_uri, retention_ms=retention_ms, dry_run=dry_run)


# ---- describe ----------------------------------------------------------------------------------

Plan = RetentionPlan | CompactionPlan | OptimizePlan | VacuumPlan


def describe(plan: Plan) -> list[str]:
    """Human-readable lines for the CLI (`--dry-run` prints them), one per segment plus a
    summary; an empty plan gives one line saying so."""
    if isinstance(plan, RetentionPlan):
        return _describe_retention(plan)
    if isinstance(plan, CompactionPlan):
        return _describe_compaction(plan)
    if isinstance(plan, OptimizePlan):
        return _describe_optimize(plan)
    if isinstance(plan, VacuumPlan):
        return _describe_vacuum(plan)
    raise TypeError(f"Not a maintenance plan: {type(plan).__name__}")


def _describe_retention(plan: RetentionPlan) -> list[str]:
    name = f"{plan.topic}-{plan.partition}"
    if plan.empty:
        return [f"{name}: nothing to delete (log start offset {plan.new_log_start_offset})"]
    lines = [
        f"{name}: delete segment {s.base_offset} ({_offsets(s)}, {reason})"
        for s, reason in zip(plan.segments, plan.reasons, strict=True)
    ]
    lines.append(
        f"{name}: log start offset {plan.segments[0].min_offset} -> "
        f"{plan.new_log_start_offset} ({plan.records_removed} records, "
        f"{format_bytes(plan.bytes_removed)} removed)"
    )
    return lines


def _describe_compaction(plan: CompactionPlan) -> list[str]:
    name = f"{plan.topic}-{plan.partition}"
    if plan.empty:
        return [
            f"{name}: nothing to compact (first dirty offset {plan.first_dirty_offset}, "
            f"cleanable end offset {plan.cleanable_end_offset})"
        ]
    lines = [
        f"{name}: compact segment {s.base_offset} ({_offsets(s)}, "
        f"{'clean' if s.max_offset < plan.first_dirty_offset else 'dirty'})"
        for s in plan.segments
    ]
    lines.append(
        f"{name}: keep the latest record per key below offset {plan.cleanable_end_offset} "
        f"(dirty from {plan.first_dirty_offset}); drop tombstones older than "
        f"{_format_time_ms(plan.tombstone_horizon_ms)}"
    )
    return lines


def _describe_optimize(plan: OptimizePlan) -> list[str]:
    name = f"{plan.topic}-{plan.partition}"
    if plan.empty:
        return [f"{name}: nothing to optimize"]
    return [
        f"{name}: optimize segment {s.base_offset} ({_offsets(s)}, {len(s.files)} files -> {n})"
        for s, n in zip(plan.segments, plan.output_file_counts, strict=True)
    ]


def _describe_vacuum(plan: VacuumPlan) -> list[str]:
    mode = "list" if plan.dry_run else "delete"
    return [
        f"{plan.table_uri}: {mode} files removed from the table more than "
        f"{_format_duration_ms(plan.retention_ms)} ago"
    ]


def _offsets(segment: Segment) -> str:
    size = format_bytes(segment.size_bytes)
    return f"offsets {segment.min_offset}..{segment.max_offset}, {size}"


def format_bytes(size_bytes: int) -> str:
    """Decimal units, as the labels say (1 MB = 1 000 000 bytes)."""
    if size_bytes < 1000:
        return f"{size_bytes} B"
    exponent = min((len(str(size_bytes)) - 1) // 3, 4)
    unit = ("kB", "MB", "GB", "TB")[exponent - 1]
    return f"{size_bytes / 1000**exponent:.1f} {unit}"


def _format_duration_ms(duration_ms: int) -> str:
    for unit, unit_ms in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if duration_ms >= unit_ms and duration_ms % unit_ms == 0:
            return f"{duration_ms // unit_ms} {unit}"
    return f"{duration_ms} ms"


def _format_time_ms(time_ms: int) -> str:
    try:
        return datetime.fromtimestamp(time_ms / 1000, UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):  # a horizon before year 1 (huge retention)
        return f"{time_ms} ms since the epoch"
