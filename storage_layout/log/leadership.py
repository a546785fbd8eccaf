"""Leadership as a Delta `txn`: who leads a partition (`leader`) or coordinates a consumer
group (`group:<id>` in the offsets table), and the one compare-and-set that changes it.

A change is a commit of that txn alone, created put-if-absent on the version after the one the
taker read: of two nodes taking over at once exactly one wins, and every later commit of the
holder carries the txn, so a deposed holder's next commit is refused (FORMAT.md §3, §9).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from storage_layout.errors import LeadershipConflict
from storage_layout.leader_epochs import UNDEFINED_EPOCH
from storage_layout.schema import LEADER_APP_ID, NODE_IDS

# Tries of one change while other commits keep taking the version after the one read.
LEADERSHIP_ATTEMPTS_MAX = 5


@dataclass(frozen=True, slots=True)
class Leadership:
    """Who leads, from the txn's version: epochs only grow, one per change."""

    epoch: int
    node_id: int

    @classmethod
    def from_version(cls, version: int | None) -> Leadership | None:
        return None if version is None else cls(version // NODE_IDS, version % NODE_IDS)

    @property
    def version(self) -> int:
        return self.epoch * NODE_IDS + self.node_id


class Outcome(enum.Enum):
    """What became of a commit that writes no data file (a txn, a schema change)."""

    COMMITTED = "committed"  # made on top of the state read, which now includes it
    LOST = "lost"  # the version was taken: nothing committed
    RELOADED = "reloaded"  # made, maybe below a checkpoint: the state was read again, and
    # the caller checks whether it shows the commit


class ElectedTable(Protocol):
    """A table holding a leadership txn: a partition's log, the consumer-offsets table."""

    name: str  # for messages: the table, or the group

    def current(self, *, fresh: bool) -> Leadership | None:
        """The holder as of the latest version (`fresh`: read the table again first)."""

    def commit_txn(self, new: Leadership) -> Outcome:
        """Commit the txn naming `new`, alone, on the version after the one read."""


def current_epoch(transactions: Mapping[str, int]) -> int:
    """The leader epoch a table's txns name (UNDEFINED_EPOCH: never led)."""
    leader = Leadership.from_version(transactions.get(LEADER_APP_ID))
    return UNDEFINED_EPOCH if leader is None else leader.epoch


def take(table: ElectedTable, node_id: int, *, expected: Leadership | None) -> Leadership:
    """Name `node_id` holder with the next epoch, if the holder is still `expected`.

    Raises:
        LeadershipConflict: the holder is no longer `expected`, or other changes kept winning.
    """
    if not 0 <= node_id < NODE_IDS:
        raise ValueError(f"node ids are 0..{NODE_IDS - 1}, got {node_id}")
    for attempt in range(LEADERSHIP_ATTEMPTS_MAX):
        current = table.current(fresh=attempt > 0)
        if current != expected:
            raise LeadershipConflict(
                f"{table.name}: held by {current}, not {expected}; not taking over."
            )
        new = Leadership(0 if current is None else current.epoch + 1, node_id)
        outcome = table.commit_txn(new)
        if outcome is Outcome.COMMITTED:
            return new
        if outcome is Outcome.RELOADED:
            if table.current(fresh=False) != new:
                raise LeadershipConflict(f"{table.name}: the leadership commit was shadowed.")
            return new
    raise LeadershipConflict(f"{table.name}: other commits kept coming first.")
