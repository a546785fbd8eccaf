"""Staging an append: its offsets from the high watermark, its segment, its data file written
before the commit (so one group's file is written while the previous group's commit is in
flight: two store requests in a row per commit become one on the critical path).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from storage_layout.log.files import APPEND_CODEC, WrittenFile, write_data_file
from storage_layout.log.snapshot import LogSnapshot
from storage_layout.store import Store
from storage_layout.topic_config import TopicConfig


@dataclass(frozen=True, slots=True)
class StagedAppend:
    """An append whose data file is written and not committed yet."""

    written: WrittenFile
    table: pa.Table  # its records, every file column: the tail chunk once committed
    base_offset: int
    last_offset: int
    now_ms: int


def stage(
    store: Store,
    snapshot: LogSnapshot,
    build: Callable[[int, int], pa.Table],
    *,
    config: TopicConfig,
    now_ms: int,
    after: StagedAppend | None,
) -> StagedAppend:
    """Write the data file `build(base_offset, now_ms)` makes, at the high watermark of
    `snapshot` (or after `after`, which commits first), in the segment it belongs to."""
    if after is not None and snapshot.high_watermark <= after.last_offset:
        # `after` is not in the snapshot yet: plan as if it were.
        snapshot = dataclasses.replace(
            snapshot,
            high_watermark=after.last_offset + 1,
            files=(*snapshot.files, after.written.data_file),
        )
    base_offset = snapshot.high_watermark
    segment = segment_for_append(snapshot, base_offset, config, now_ms)
    table = build(base_offset, now_ms)
    written = write_data_file(store, table, segment, now_ms, codec=APPEND_CODEC)
    return StagedAppend(written, table, base_offset, base_offset + table.num_rows - 1, now_ms)


def segment_for_append(
    snapshot: LogSnapshot, base_offset: int, config: TopicConfig, now_ms: int
) -> int:
    """The active segment, or a new one (base = this append's first offset) when it is full
    (`segment.bytes`) or old (`segment.ms`, measured from its first file's append time)."""
    active = snapshot.active_segment
    if active is None:
        return base_offset
    files = snapshot.segment_files(active)
    size_bytes = sum(f.size_bytes for f in files)
    created_ms = min(f.modification_time_ms for f in files)
    if size_bytes >= config.segment_bytes or now_ms - created_ms >= config.segment_ms:
        return base_offset
    return active
