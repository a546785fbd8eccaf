"""Leader epochs: where each leadership epoch of a partition began in its offsets (Kafka's
leader-epoch cache, KIP-101 and KIP-320), so clients can tell which leader wrote a record and
check their position after a leader change (OffsetForLeaderEpoch).

The commit that takes a partition's leadership (leadership.take) carries, next to the `leader`
txn, a txn `leader_epoch:<epoch>` whose version is the epoch's start offset: the high watermark
of the version that commit was built on, where the new leader's first record goes (FORMAT.md
§7). Appends made outside the leader (direct appends) belong to the epoch in force, as in Kafka
a record belongs to the leader that wrote it. Tables older than this record no epoch for their
earlier leaderships: their records have no known epoch (-1), as Kafka's records from before
leader epochs (message format v1) have none.

Pure: no I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass

from storage_layout.schema import LEADER_EPOCH_APP_ID_PREFIX

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


def epoch_app_id(epoch: int) -> str:
    return f"{LEADER_EPOCH_APP_ID_PREFIX}{epoch}"


@dataclass(frozen=True, slots=True)
class LeaderEpochs:
    """(epoch, start offset) pairs, both ascending. An epoch in which nothing was written is
    left out (the next one starts at the same offset), as Kafka's cache leaves it out."""

    entries: tuple[tuple[int, int], ...] = ()

    @classmethod
    def from_transactions(cls, transactions: Mapping[str, int]) -> LeaderEpochs:
        starts = sorted(
            (int(app_id.removeprefix(LEADER_EPOCH_APP_ID_PREFIX)), start)
            for app_id, start in transactions.items()
            if app_id.startswith(LEADER_EPOCH_APP_ID_PREFIX)
        )
        kept: list[tuple[int, int]] = []
        for epoch, start in starts:
            while kept and kept[-1][1] >= start:  # an epoch without records
                kept.pop()
            kept.append((epoch, start))
        return cls(tuple(kept))

    def epoch_of(self, offset: int) -> int:
        """The epoch whose leader wrote `offset` (UNDEFINED_EPOCH: before the first known)."""
        index = bisect.bisect_right(self.entries, offset, key=lambda entry: entry[1]) - 1
        return self.entries[index][0] if index >= 0 else UNDEFINED_EPOCH

    def end_offset_for(
        self, requested: int, *, current_epoch: int, log_end_offset: int
    ) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch answer: (the largest epoch <= `requested`, the offset
        where the epoch after it starts, or the log end for the current epoch).

        An epoch before the first known one ends where the first known starts; the epochs from
        the last known one to the current (a table whose earlier epochs are not recorded)
        end at the log end: never earlier than any record the requester can have read.
        """
        if requested == UNDEFINED_EPOCH or requested > current_epoch:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested == current_epoch:
            return requested, log_end_offset
        index = bisect.bisect_right(self.entries, requested, key=lambda entry: entry[0])
        following = self.entries[index][1] if index < len(self.entries) else log_end_offset
        if index == 0:
            return requested, following
        return self.entries[index - 1][0], following
