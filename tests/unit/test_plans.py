"""Maintenance plans follow Kafka's retention and cleaner rules on hand-built snapshots."""

import dataclasses

import pytest

from storage_layout.errors import CorruptPartition
from storage_layout.log import DataFile, LogSnapshot
from storage_layout.maintenance.plans import (
    LOG_START,
    RETENTION_BYTES,
    RETENTION_MS,
    VACUUM_RETENTION_MS_MIN,
    describe,
    plan_compact_keys,
    plan_optimize_files,
    plan_retention,
    plan_vacuum,
    segments,
)
from storage_layout.topic_config import TopicConfig

NOW_MS = 1_700_000_000_000
HOUR_MS = 3_600_000
OLD_MS = NOW_MS - 100 * HOUR_MS
NEW_MS = NOW_MS - 1000
TABLE_VERSION = 42


def data_file(segment, first, last, *, size_bytes=100, max_timestamp_ms=OLD_MS, modified_ms=None):
    return DataFile(
        path=f"segment={segment}/part-{first}.zstd.parquet",
        segment=segment,
        min_offset=first,
        max_offset=last,
        num_records=last - first + 1,
        size_bytes=size_bytes,
        modification_time_ms=OLD_MS if modified_ms is None else modified_ms,
        max_timestamp_ms=max_timestamp_ms,
    )


def snapshot(*files, high_watermark=None):
    ordered = tuple(sorted(files, key=lambda f: f.min_offset))
    if high_watermark is None:
        high_watermark = ordered[-1].max_offset + 1 if ordered else 0
    return LogSnapshot(table_version=TABLE_VERSION, high_watermark=high_watermark, files=ordered)


def four_segments(timestamps_ms=(OLD_MS,) * 4, sizes_bytes=(100,) * 4):
    """Segments 0, 100, 200 (closed) and 300 (active), 100 records each."""
    return snapshot(
        *(
            data_file(base, base, base + 99, size_bytes=size, max_timestamp_ms=ts)
            for base, ts, size in zip((0, 100, 200, 300), timestamps_ms, sizes_bytes, strict=True)
        )
    )


def config(**fields):
    return dataclasses.replace(TopicConfig(retention_ms=-1, retention_bytes=-1), **fields)


def retention(snap, **fields):
    return plan_retention(snap, config(**fields), topic="orders", partition=0, now_ms=NOW_MS)


def compaction(snap, first_dirty_offset=0, **fields):
    fields.setdefault("cleanup_policy", "compact")
    return plan_compact_keys(
        snap,
        config(**fields),
        topic="orders",
        partition=0,
        now_ms=NOW_MS,
        first_dirty_offset=first_dirty_offset,
    )


def bases(plan):
    return [s.base_offset for s in plan.segments]


# ---- segments ----------------------------------------------------------------------------------


def test_segments_group_files_in_offset_order_and_only_the_highest_is_active():
    """Files are grouped by `segment`, summed, and only the highest base offset is active."""
    snap = snapshot(
        data_file(0, 0, 9, size_bytes=10, max_timestamp_ms=500),
        data_file(0, 10, 19, size_bytes=20, max_timestamp_ms=300),
        data_file(20, 20, 24, size_bytes=5, max_timestamp_ms=900),
    )
    first, active = segments(snap)
    assert (first.base_offset, first.min_offset, first.max_offset) == (0, 0, 19)
    assert [f.min_offset for f in first.files] == [0, 10]
    assert (first.size_bytes, first.num_records, first.max_timestamp_ms) == (30, 20, 500)
    assert (first.active, active.active) == (False, True)
    assert (active.base_offset, active.num_records) == (20, 5)


def test_segment_without_timestamp_statistics_falls_back_to_modification_time():
    """A file lacking max_timestamp_ms makes the segment's age its newest modification time,
    never older than a record timestamp the other files report."""
    snap = snapshot(
        data_file(0, 0, 9, max_timestamp_ms=5_000, modified_ms=1_000),
        data_file(0, 10, 19, max_timestamp_ms=None, modified_ms=3_000),
        data_file(20, 20, 29, max_timestamp_ms=None, modified_ms=7_000),
        data_file(30, 30, 39, max_timestamp_ms=None, modified_ms=8_000),
    )
    mixed, stats_less, _ = segments(snap)
    assert mixed.max_timestamp_ms is None
    assert mixed.largest_timestamp_ms == 5_000
    assert stats_less.largest_timestamp_ms == 7_000


def test_overlapping_segments_are_corrupt():
    """Segments whose offsets interleave cannot be deleted as a prefix: CorruptPartition."""
    snap = snapshot(data_file(0, 0, 50), data_file(10, 10, 20))
    with pytest.raises(CorruptPartition, match="overlap"):
        segments(snap)
    with pytest.raises(CorruptPartition, match="below its base offset"):
        segments(snapshot(data_file(5, 0, 9)))


# ---- retention ---------------------------------------------------------------------------------


def test_retention_ms_deletes_an_expired_prefix_and_stops_at_the_first_recent_segment():
    """Segment 200 is expired but lies behind the recent segment 100: only 0 goes."""
    snap = four_segments(timestamps_ms=(OLD_MS, NEW_MS, OLD_MS, OLD_MS))
    plan = retention(snap, retention_ms=HOUR_MS)
    assert bases(plan) == [0]
    assert plan.reasons == (RETENTION_MS,)
    assert plan.new_log_start_offset == 100
    assert (plan.bytes_removed, plan.records_removed) == (100, 100)
    assert (plan.topic, plan.partition, plan.table_version) == ("orders", 0, TABLE_VERSION)


def test_retention_ms_keeps_a_segment_exactly_at_the_limit():
    """Kafka deletes when now - largestTimestamp > retention.ms, strictly."""
    snap = four_segments(timestamps_ms=(NOW_MS - HOUR_MS - 1, NOW_MS - HOUR_MS, OLD_MS, OLD_MS))
    assert bases(retention(snap, retention_ms=HOUR_MS)) == [0]


@pytest.mark.parametrize(
    ("retention_bytes", "expected"),
    [
        (1000, []),  # diff 0: no segment fits
        (901, []),  # diff 99 < 100
        (900, [0]),  # diff 100: exactly the oldest
        (401, [0, 100]),  # diff 599: 499, 299, then 299 - 300 < 0
        (400, [0, 100, 200]),  # diff 600: 500, 300, 0 (>= 0 still deletes)
        (0, [0, 100, 200]),  # everything closed, never the active segment
    ],
)
def test_retention_bytes_deletes_oldest_segments_while_the_diff_covers_them(
    retention_bytes, expected
):
    """diff = log size (active included) - retention.bytes; delete while diff - size >= 0."""
    snap = four_segments(sizes_bytes=(100, 200, 300, 400))
    plan = retention(snap, retention_bytes=retention_bytes)
    assert bases(plan) == expected
    assert plan.reasons == (RETENTION_BYTES,) * len(expected)


def test_time_is_checked_before_size_and_size_counts_what_time_left():
    """Segment 0 is expired (retention.ms); size then takes 100 on the remaining 300 bytes."""
    snap = four_segments(timestamps_ms=(OLD_MS, NEW_MS, NEW_MS, NEW_MS))
    plan = retention(snap, retention_ms=HOUR_MS, retention_bytes=200)
    assert bases(plan) == [0, 100]
    assert plan.reasons == (RETENTION_MS, RETENTION_BYTES)
    assert plan.new_log_start_offset == 200


def test_a_segment_deleted_for_both_reasons_names_retention_ms():
    """Both rules would delete segments 0 and 100; time applied first, so it is named."""
    snap = four_segments(timestamps_ms=(OLD_MS, OLD_MS, NEW_MS, NEW_MS))
    plan = retention(snap, retention_ms=HOUR_MS, retention_bytes=100)
    assert bases(plan) == [0, 100, 200]
    assert plan.reasons == (RETENTION_MS, RETENTION_MS, RETENTION_BYTES)


def test_infinite_retention_deletes_nothing():
    """retention.ms = retention.bytes = -1: old and large segments stay."""
    snap = four_segments(sizes_bytes=(10**12,) * 4)
    plan = retention(snap, retention_ms=-1, retention_bytes=-1)
    assert plan.empty
    assert plan.reasons == ()
    assert plan.new_log_start_offset == 0
    assert (plan.bytes_removed, plan.records_removed) == (0, 0)


@pytest.mark.parametrize(
    ("policy", "deleted"), [("compact", []), ("compact,delete", [0, 100, 200])]
)
def test_retention_applies_only_when_the_policy_contains_delete(policy, deleted):
    """A compact-only topic keeps everything whatever its retention settings."""
    snap = four_segments()
    plan = retention(snap, cleanup_policy=policy, retention_ms=0, retention_bytes=0)
    assert bases(plan) == deleted


def test_the_active_segment_is_never_deleted_even_old_and_huge():
    """A single expired, oversized segment is active: the plan is empty."""
    snap = snapshot(data_file(0, 0, 999, size_bytes=10**12, max_timestamp_ms=0))
    plan = retention(snap, retention_ms=0, retention_bytes=0)
    assert plan.empty
    assert plan.new_log_start_offset == 0


def test_retention_of_everything_closed_moves_the_log_start_to_the_active_segment():
    """The new log start is the first offset left: the active segment's first record."""
    snap = snapshot(data_file(0, 0, 9), data_file(10, 15, 19))  # 10..14 compacted away
    plan = retention(snap, retention_ms=0)
    assert bases(plan) == [0]
    assert plan.new_log_start_offset == 15


def test_empty_log_plans_nothing_and_keeps_the_high_watermark_as_log_start():
    """No files: every plan is empty and the log start stays the high watermark."""
    snap = snapshot(high_watermark=500)
    assert segments(snap) == ()
    plan = retention(snap, retention_ms=0, retention_bytes=0)
    assert plan.empty
    assert plan.new_log_start_offset == 500
    compact = compaction(snap, first_dirty_offset=500)
    assert compact.empty
    assert compact.cleanable_end_offset == 500
    assert plan_optimize_files(snap, topic="orders", partition=0).empty


# ---- key compaction ----------------------------------------------------------------------------


def test_compaction_cleans_closed_segments_up_to_the_active_one():
    """With no lag every closed segment is cleanable, even one with a future timestamp."""
    snap = four_segments(timestamps_ms=(OLD_MS, NOW_MS + HOUR_MS, OLD_MS, OLD_MS))
    plan = compaction(snap, min_compaction_lag_ms=0)
    assert bases(plan) == [0, 100, 200]
    assert plan.cleanable_end_offset == 300
    assert plan.first_dirty_offset == 0
    assert plan.table_version == TABLE_VERSION


def test_min_compaction_lag_stops_the_cleanable_prefix_at_the_first_recent_segment():
    """Segment 100 is newer than the lag: 200, though old, lies behind it and waits."""
    snap = four_segments(timestamps_ms=(OLD_MS, NEW_MS, OLD_MS, OLD_MS))
    plan = compaction(snap, min_compaction_lag_ms=HOUR_MS)
    assert bases(plan) == [0]
    assert plan.cleanable_end_offset == 100


def test_min_compaction_lag_compares_with_less_or_equal():
    """A segment whose newest record is exactly now - lag old is cleanable (Kafka's `>`)."""
    snap = four_segments(timestamps_ms=(NOW_MS - HOUR_MS, NOW_MS - HOUR_MS + 1, OLD_MS, OLD_MS))
    assert compaction(snap, min_compaction_lag_ms=HOUR_MS).cleanable_end_offset == 100


@pytest.mark.parametrize("first_dirty_offset", [100, 150])
def test_no_dirty_cleanable_record_makes_the_plan_empty(first_dirty_offset):
    """Everything below the lag-blocked segment 100 was cleaned: nothing to do."""
    snap = four_segments(timestamps_ms=(OLD_MS, NEW_MS, OLD_MS, OLD_MS))
    plan = compaction(snap, first_dirty_offset, min_compaction_lag_ms=HOUR_MS)
    assert plan.empty
    assert plan.cleanable_end_offset == first_dirty_offset
    assert plan.first_dirty_offset == first_dirty_offset


def test_a_cleaned_log_up_to_the_active_segment_is_not_compacted_again():
    """first_dirty_offset at the active segment: no dirty closed record."""
    plan = compaction(four_segments(), first_dirty_offset=300)
    assert plan.empty
    assert plan.cleanable_end_offset == 300


def test_clean_segments_are_recopied_with_the_dirty_ones():
    """Dirty from 200: segments 0 and 100 (clean) are rewritten too, as Kafka recopies them."""
    plan = compaction(four_segments(), first_dirty_offset=200)
    assert bases(plan) == [0, 100, 200]
    assert (plan.first_dirty_offset, plan.cleanable_end_offset) == (200, 300)


def test_the_lag_is_checked_only_on_the_dirty_part():
    """A clean segment with a recent record does not block cleaning the dirty ones after it."""
    snap = four_segments(timestamps_ms=(NEW_MS, OLD_MS, OLD_MS, OLD_MS))
    plan = compaction(snap, first_dirty_offset=100, min_compaction_lag_ms=HOUR_MS)
    assert bases(plan) == [0, 100, 200]
    assert compaction(snap, first_dirty_offset=0, min_compaction_lag_ms=HOUR_MS).empty


@pytest.mark.parametrize("first_dirty_offset", [-1, 5, 401])
def test_first_dirty_offset_outside_the_log_resets_to_the_log_start(first_dirty_offset):
    """Below the log start (retention deleted past it) or above the HW, all of it is dirty."""
    snap = snapshot(*(data_file(b, b, b + 9) for b in (10, 20, 30)), high_watermark=400)
    plan = compaction(snap, first_dirty_offset)
    assert plan.first_dirty_offset == 10
    assert bases(plan) == [10, 20]


def test_tombstone_horizon_is_now_minus_delete_retention():
    """Tombstones older than now - delete.retention.ms are dropped."""
    plan = compaction(four_segments(), delete_retention_ms=HOUR_MS)
    assert plan.tombstone_horizon_ms == NOW_MS - HOUR_MS


def test_compaction_applies_only_when_the_policy_contains_compact():
    """A delete-only topic is never compacted; compact,delete is."""
    assert compaction(four_segments(), cleanup_policy="delete").empty
    assert bases(compaction(four_segments(), cleanup_policy="compact,delete")) == [0, 100, 200]


# ---- file optimization -------------------------------------------------------------------------


def test_optimize_takes_only_closed_segments_with_several_small_files():
    """Multi-file closed segments are rewritten; single-file and active segments are not."""
    snap = snapshot(
        data_file(0, 0, 9),
        data_file(0, 10, 19),
        data_file(0, 20, 29),
        data_file(30, 30, 39),
        data_file(40, 40, 49),
        data_file(40, 50, 59),
    )
    plan = plan_optimize_files(snap, topic="orders", partition=0)
    assert bases(plan) == [0]
    assert plan.output_file_counts == (1,)
    assert [len(s.files) for s in plan.segments] == [3]
    assert plan.table_version == TABLE_VERSION


def test_optimize_leaves_segments_already_made_of_target_sized_files():
    """Files of 1000 + 1000 + 10 bytes need ceil(2010 / 1000) = 3 files anyway; 4 small ones
    of 300 bytes become ceil(1200 / 1000) = 2."""
    snap = snapshot(
        data_file(0, 0, 9, size_bytes=1000),
        data_file(0, 10, 19, size_bytes=1000),
        data_file(0, 20, 29, size_bytes=10),
        *(data_file(30, o, o + 9, size_bytes=300) for o in (30, 40, 50, 60)),
        data_file(70, 70, 79),
    )
    plan = plan_optimize_files(snap, topic="orders", partition=0, target_file_bytes=1000)
    assert bases(plan) == [30]
    assert plan.output_file_counts == (2,)
    assert plan.target_file_bytes == 1000


def test_optimize_refuses_a_non_positive_target():
    """A target of 0 bytes would divide by zero: ValueError."""
    with pytest.raises(ValueError, match="target_file_bytes"):
        plan_optimize_files(four_segments(), topic="orders", partition=0, target_file_bytes=0)


# ---- vacuum ------------------------------------------------------------------------------------


def test_vacuum_below_the_minimum_retention_is_refused():
    """Below 10 minutes a reader on an older version could lose a file: ValueError."""
    with pytest.raises(ValueError, match="minimum of 600000 ms"):
        plan_vacuum("/data/t", retention_ms=VACUUM_RETENTION_MS_MIN - 1, dry_run=False)
    plan = plan_vacuum("/data/t", retention_ms=VACUUM_RETENTION_MS_MIN, dry_run=True)
    assert (plan.table_uri, plan.retention_ms, plan.dry_run) == ("/data/t", 600_000, True)


def test_vacuum_minimum_can_be_lowered_but_never_below_zero():
    """A caller may lower the minimum (tests), yet a negative retention is still refused."""
    plan = plan_vacuum("/t", retention_ms=0, dry_run=False, minimum_retention_ms=0)
    assert plan.retention_ms == 0
    with pytest.raises(ValueError, match="below the minimum"):
        plan_vacuum("/t", retention_ms=-1, dry_run=False, minimum_retention_ms=-5)


# ---- describe ----------------------------------------------------------------------------------


def test_describe_retention_names_segment_offsets_size_and_reason():
    """One line per deleted segment, then the log start move."""
    snap = snapshot(
        data_file(0, 0, 999, size_bytes=1_200_000), data_file(1000, 1000, 1999, size_bytes=10)
    )
    lines = describe(retention(snap, retention_ms=HOUR_MS))
    assert lines == [
        "orders-0: delete segment 0 (offsets 0..999, 1.2 MB, retention.ms)",
        "orders-0: log start offset 0 -> 1000 (1000 records, 1.2 MB removed)",
    ]
    assert describe(retention(snap)) == ["orders-0: nothing to delete (log start offset 0)"]


def test_describe_compaction_optimize_and_vacuum():
    """Each plan kind reads as what it would do."""
    compact = describe(compaction(four_segments(), first_dirty_offset=100, delete_retention_ms=0))
    assert compact[0] == "orders-0: compact segment 0 (offsets 0..99, 100 B, clean)"
    assert compact[1] == "orders-0: compact segment 100 (offsets 100..199, 100 B, dirty)"
    assert compact[-1].startswith("orders-0: keep the latest record per key below offset 300")
    assert compact[-1].endswith("drop tombstones older than 2023-11-14T22:13:20+00:00")
    snap = snapshot(data_file(0, 0, 9), data_file(0, 10, 19), data_file(20, 20, 29))
    assert describe(plan_optimize_files(snap, topic="orders", partition=0)) == [
        "orders-0: optimize segment 0 (offsets 0..19, 200 B, 2 files -> 1)"
    ]
    vacuum = plan_vacuum("/data/t", retention_ms=HOUR_MS, dry_run=True)
    assert describe(vacuum) == ["/data/t: list files removed from the table more than 1 h ago"]
    with pytest.raises(TypeError):
        describe(object())


def test_segments_below_a_moved_log_start_go_and_the_start_never_moves_back():
    """DeleteRecords moved the log start to 150: segment 0 lies wholly below it (deleted under
    any policy, even compact), segment 100 straddles it (kept), and the new start stays 150."""
    moved = dataclasses.replace(four_segments(timestamps_ms=(NEW_MS,) * 4), start_offset=150)
    plan = retention(moved, cleanup_policy="compact")
    assert bases(plan) == [0]
    assert plan.reasons == (LOG_START,)
    assert plan.new_log_start_offset == 150
