"""Reading partition tables for the log and the leader election: a table's state with its
failures made into the storage layer's errors, and a reader that keeps up with new commits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from deltalake.exceptions import DeltaError, TableNotFoundError

from storage_layout.errors import CorruptPartition, PartitionTableMissing, StorageUnavailable
from storage_layout.leader_epochs import LeaderEpochs
from storage_layout.log import housekeeping, log_commit
from storage_layout.log.leadership import Leadership
from storage_layout.log.replay import (
    TableMissing,
    TableState,
    UnreadableLog,
    read_newer,
    read_state,
)
from storage_layout.log.tables import load_table_explained
from storage_layout.protocol_check import ProtocolVersions, check_protocol
from storage_layout.schema import LEADER_APP_ID, LOG_APP_ID
from storage_layout.store import Store, open_store


def read_table_state(table_uri: str, log: Store | None = None) -> TableState:
    """The table's state (replay.read_state), its protocol checked against the allow-list.

    Raises:
        CorruptPartition: no table there, a damaged commit file or checkpoint.
        StorageUnavailable: the table could not be read (retriable).
        UnsupportedTableFeatures: the table uses features lakelog cannot handle.
    """
    log = log or open_store(table_uri).child(log_commit.LOG_DIR)
    try:
        state = _read_explained(table_uri, log)
    except OSError as error:
        raise StorageUnavailable(f"Cannot read table {table_uri}: {error}") from error
    check_protocol(ProtocolVersions.of(state.protocol), table_uri)
    return state


def latest_state(
    table_uri: str, log: Store, state: TableState | None, latest_known_at: float
) -> TableState:
    """The table's latest state: `state` (known to be the latest at `latest_known_at`,
    monotonic s) with the commits after it, when none of those can have been trimmed yet
    (see TableReader); otherwise read afresh."""
    if (
        state is None
        or (time.monotonic() - latest_known_at) * 1000 >= housekeeping.LOG_GRACE_MS / 2
    ):
        return read_table_state(table_uri, log)
    try:
        newer = read_newer(log, state, table_uri)
    except OSError as error:
        raise StorageUnavailable(f"Cannot read {table_uri}: {error}") from error
    if newer.protocol is not state.protocol:
        check_protocol(ProtocolVersions.of(newer.protocol), table_uri)
    return newer


def _read_explained(table_uri: str, log: Store) -> TableState:
    try:
        return read_state(log, table_uri)
    except TableMissing as error:
        raise PartitionTableMissing(str(error)) from error
    except UnreadableLog as error:
        unreadable = error
    # delta-rs explains a damaged checkpoint (and drops a hint naming a missing one); if it
    # can read the table after all, so can a second replay.
    try:
        load_table_explained(table_uri, without_files=True)
    except TableNotFoundError as error:
        raise PartitionTableMissing(f"No Delta table at {table_uri}: {error}") from error
    except DeltaError as error:
        raise CorruptPartition(f"{table_uri}: {error}") from error
    try:
        return read_state(log, table_uri)
    except (TableMissing, UnreadableLog):
        raise CorruptPartition(f"{unreadable}") from unreadable


@dataclass
class TableReader:
    """A table's state, kept up to date by reading only the commits after it while that is
    safe: log trimming removes commits only once they are LOG_GRACE_MS old and below the
    previous checkpoint, so commits made since the state was last known to be the latest,
    less than half the grace ago (margin for clocks), are all still there. Otherwise it reads
    the table afresh. Not thread-safe."""

    table_uri: str
    log: Store
    state: TableState
    latest_known_at: float  # time.monotonic() when `state` was known to be the latest

    @classmethod
    def read(cls, table_uri: str) -> TableReader:
        log = open_store(table_uri).child(log_commit.LOG_DIR)
        started = time.monotonic()
        return cls(table_uri, log, read_table_state(table_uri, log), started)

    def refresh(self) -> TableState:
        started = time.monotonic()
        self.state = latest_state(self.table_uri, self.log, self.state, self.latest_known_at)
        self.latest_known_at = started
        return self.state

    def leader(self) -> Leadership | None:
        """The leader the state names (call `refresh` first for the latest)."""
        return Leadership.from_version(self.state.transactions.get(LEADER_APP_ID))

    def leader_epochs(self) -> LeaderEpochs:
        return LeaderEpochs.from_transactions(self.state.transactions)

    def high_watermark(self) -> int:
        """The offset after the last one assigned (the `log` txn: the offset CAS)."""
        last_assigned = self.state.transactions.get(LOG_APP_ID)
        return 0 if last_assigned is None else last_assigned + 1
