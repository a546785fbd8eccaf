"""The transactions of one partition as readers need them (FORMAT.md §14): the open ones, whose
first offsets bound the last stable offset, and the aborted ones, which read_committed Kafka
readers skip. Built from the rows of the table itself (offset, producer_id, transactional,
control), so any node, leader or not, derives the same index from the same snapshot."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from storage_layout.schema import CONTROL_ABORT

# What the index reads of a data file.
INDEX_COLUMNS = ("offset", "producer_id", "transactional", "control")


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """A transaction of `producer_id` from `first_offset` up to its ABORT marker at
    `last_offset` (Kafka's aborted transaction index entry)."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class TransactionIndex:
    """Open and aborted transactions among offsets below `indexed_to`."""

    indexed_to: int = 0
    # producer id -> first offset of its open transaction
    open_first_offsets: Mapping[int, int] = field(default_factory=dict)
    aborted: tuple[AbortedTransaction, ...] = ()  # in marker (last_offset) order

    def last_stable_offset(self, high_watermark: int, log_start_offset: int = 0) -> int:
        """The first offset of the oldest open transaction, else the high watermark (an index
        newer than the snapshot of `high_watermark` never puts it past that), never below the
        log start (retention may delete an open transaction's first records, as in Kafka)."""
        oldest_open = min(self.open_first_offsets.values(), default=high_watermark)
        return max(min(oldest_open, high_watermark), log_start_offset)

    def aborted_between(self, from_offset: int, to_offset: int) -> list[AbortedTransaction]:
        """Aborted transactions with records in [from_offset, to_offset)."""
        lasts = [entry.last_offset for entry in self.aborted]
        start = bisect.bisect_left(lasts, from_offset)
        return [entry for entry in self.aborted[start:] if entry.first_offset < to_offset]

    def advanced(self, rows: pa.Table, indexed_to: int) -> TransactionIndex:
        """The index after `rows` (INDEX_COLUMNS of transactional rows at or above
        `self.indexed_to`, offset order), now covering offsets below `indexed_to`."""
        open_first = dict(self.open_first_offsets)
        aborted = list(self.aborted)
        columns = rows.to_pydict()
        for offset, producer_id, control in zip(
            columns["offset"], columns["producer_id"], columns["control"], strict=True
        ):
            if control is None:
                open_first.setdefault(producer_id, offset)
                continue
            first = open_first.pop(producer_id, None)
            if control == CONTROL_ABORT and first is not None:
                aborted.append(AbortedTransaction(producer_id, first, offset))
        return TransactionIndex(indexed_to, open_first, tuple(aborted))


def aborted_mask(records: pa.Table, aborted: Iterable[AbortedTransaction]) -> pa.ChunkedArray:
    """True for the rows of `records` (offset, producer_id and transactional columns at least)
    that belong to one of the `aborted` transactions: transactional rows of its producer within
    [first_offset, last_offset]. Markers are not covered: they are told apart by `control`."""
    offsets, producers = records.column("offset"), records.column("producer_id")
    mask = pc.equal(offsets, -1)  # all False, the shape of the table
    for entry in aborted:
        in_range = pc.and_(
            pc.greater_equal(offsets, entry.first_offset),
            pc.less_equal(offsets, entry.last_offset),
        )
        mask = pc.or_(mask, pc.and_(pc.equal(producers, entry.producer_id), in_range))
    transactional = pc.fill_null(records.column("transactional"), False)
    return pc.and_(pc.fill_null(mask, False), transactional)


def transactional_rows(table: pa.Table, from_offset: int) -> pa.Table:
    """The INDEX_COLUMNS of `table`'s transactional rows at or above `from_offset`."""
    table = table.select(list(INDEX_COLUMNS))
    if not table.num_rows:  # (a partition without transactions: no compute calls)
        return table
    keep = pc.and_(
        pc.fill_null(table.column("transactional"), False),
        pc.greater_equal(table.column("offset"), from_offset),
    )
    return table.filter(keep)
