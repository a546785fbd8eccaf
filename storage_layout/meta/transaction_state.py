"""Transaction coordinator state (FORMAT.md §15): each transactional id's state as numbered
JSON objects under `_meta/transactions/`, each created put-if-absent.

A state change is the creation of the next number: of two coordinators that read the same
state (a deposed one still running, its successor), only one can create the next, so the
loser can never act on a stale state. Older numbers are deleted once a newer one exists.
Per-id objects rather than one Delta table: every transactional id changes state several
times per transaction, and one table would make all of them take turns on its versions.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storage_layout import paths
from storage_layout.errors import StorageUnavailable
from storage_layout.records import TopicPartition
from storage_layout.store import Store, StoredObject, open_store

TRANSACTIONS_DIR = "transactions"
HEX_KEY_CHARS_MAX = 200  # ids up to 100 bytes are named by their hex (readable, decodable)
HASHED_NAME = "~"  # longer ones by "~" and the SHA-256 of the id
# Which transactional ids hold offsets of which group (FORMAT.md §15): a group's coordinator,
# new after a failover, learns from one listing which offsets are still unstable (KIP-447).
TRANSACTION_GROUPS_DIR = "transaction_groups"
_SEQUENCE_DIGITS = 12


class TxnStatus(enum.Enum):
    """Kafka's transaction states (TransactionState in its coordinator)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def preparing(self) -> bool:
        return self in (TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT)

    @property
    def complete(self) -> bool:
        """Nothing of a transaction is pending (none begun, or it ended)."""
        return self in (TxnStatus.EMPTY, TxnStatus.COMPLETE_COMMIT, TxnStatus.COMPLETE_ABORT)


@dataclass(frozen=True, slots=True)
class PendingOffset:
    """An offset sent within a transaction (TxnOffsetCommit), committed with it."""

    group_id: str
    topic: str
    partition: int
    offset: int
    metadata: str | None = None
    leader_epoch: int = -1  # Kafka's committed leader epoch (-1: none; absent in older objects)


def pending_offset_from(body: Mapping[str, Any]) -> PendingOffset:
    """A PendingOffset from its JSON, fields it does not know left out (a newer node's)."""
    known = {f.name for f in dataclasses.fields(PendingOffset)}
    return PendingOffset(**{name: value for name, value in body.items() if name in known})


@dataclass(frozen=True, slots=True)
class TxnState:
    """One transactional id's state; `sequence` numbers its object (0: none stored yet)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    status: TxnStatus
    timeout_ms: int
    partitions: tuple[TopicPartition, ...] = ()
    groups: tuple[str, ...] = ()
    offsets: tuple[PendingOffset, ...] = ()
    started_ms: int = 0  # when the transaction became Ongoing
    updated_ms: int = 0
    sequence: int = 0

    def expired(self, now_ms: int) -> bool:
        return self.status is TxnStatus.ONGOING and now_ms - self.started_ms > self.timeout_ms

    def to_json(self) -> bytes:
        body = dataclasses.asdict(self)
        body["status"] = self.status.value
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> TxnState:
        body = json.loads(data)
        return cls(
            transactional_id=body["transactional_id"],
            producer_id=body["producer_id"],
            producer_epoch=body["producer_epoch"],
            status=TxnStatus(body["status"]),
            timeout_ms=body["timeout_ms"],
            partitions=tuple(TopicPartition(**p) for p in body["partitions"]),
            groups=tuple(body["groups"]),
            offsets=tuple(pending_offset_from(o) for o in body["offsets"]),
            started_ms=body["started_ms"],
            updated_ms=body["updated_ms"],
            sequence=body["sequence"],
        )


class StateTaken(Exception):
    """Another coordinator changed the transactional id's state first: read it again."""


class TransactionStateStore:
    """The `_meta/transactions/` objects of one storage root. Thread-safe (no local state)."""

    def __init__(self, root: str) -> None:
        self._store: Store = open_store(paths.meta_table_uri(root, TRANSACTIONS_DIR))
        self._groups: Store = open_store(paths.meta_table_uri(root, TRANSACTION_GROUPS_DIR))

    def note_group(self, group_id: str, transactional_id: str) -> None:
        """Record that the transactional id's open transaction holds offsets of the group
        (before they are sent, so a new coordinator of the group can find them)."""
        try:
            self._groups.put(_group_entry(group_id, transactional_id), transactional_id.encode())
        except OSError as error:
            raise StorageUnavailable(f"Cannot note group {group_id!r}: {error}") from None

    def forget_group(self, group_id: str, transactional_id: str) -> None:
        """The transaction ended: its offsets of the group are stable."""
        try:
            self._groups.delete(_group_entry(group_id, transactional_id))
        except OSError:
            pass  # a leftover entry names a complete transaction: readers skip it

    def pending_offsets_of(self, group_id: str) -> list[tuple[int, list[TopicPartition]]]:
        """(producer id, partitions) of each transaction not yet complete that holds offsets
        of the group."""
        pending = []
        for transactional_id in self.transactions_of_group(group_id):
            state = self.load(transactional_id)
            if state is None or state.status.complete:
                continue
            partitions = [
                TopicPartition(o.topic, o.partition)
                for o in state.offsets
                if o.group_id == group_id
            ]
            if partitions:
                pending.append((state.producer_id, partitions))
        return pending

    def transactions_of_group(self, group_id: str) -> list[str]:
        """Transactional ids whose transaction held offsets of the group when last noted."""
        ids = []
        for entry in _listed(self._groups, _group_prefix(group_id)):
            data = self._groups.get(entry.name)  # the id itself: names may be hashes of it
            if data is not None:
                ids.append(data.decode())
        return ids

    def load(self, transactional_id: str) -> TxnState | None:
        """The newest state of `transactional_id`, or None if it never had one."""
        names = [o.name for o in _listed(self._store, _prefix(transactional_id))]
        for name in reversed(names):  # sorted: the newest state is last
            data = self._store.get(name)
            if data is not None:  # else deleted as superseded meanwhile: a newer one exists
                return TxnState.from_json(data)
        return None

    def save(self, state: TxnState) -> TxnState:
        """Store `state` as the one after `state.sequence` (the state it was derived from).

        Raises:
            StateTaken: another coordinator stored that number first.
            StorageUnavailable: the store could not be written.
        """
        stored = dataclasses.replace(state, sequence=state.sequence + 1)
        name = _name(state.transactional_id, stored.sequence)
        try:
            created = self._store.put_if_absent(name, stored.to_json())
        except OSError as error:
            raise StorageUnavailable(f"Cannot store transaction state {name}: {error}") from None
        if not created:
            raise StateTaken(f"Transactional id {state.transactional_id!r} changed meanwhile.")
        if state.sequence:
            self._forget(_name(state.transactional_id, state.sequence))
        return stored

    def transactional_ids(self) -> list[str]:
        """Every transactional id with a stored state."""
        ids, newest_hashed = set(), {}
        for stored in _listed(self._store, ""):  # one listing, sorted: the newest is last
            name = stored.name
            if name.startswith(HASHED_NAME):
                newest_hashed[name.partition(".")[0]] = name
            elif (transactional_id := _transactional_id(name)) is not None:
                ids.add(transactional_id)
        for name in newest_hashed.values():  # long ids: named by a hash, the id is inside
            data = self._store.get(name)
            if data is not None:
                ids.add(TxnState.from_json(data).transactional_id)
        return sorted(ids)

    def _forget(self, name: str) -> None:
        try:
            self._store.delete(name)
        except OSError:
            pass  # a superseded state left behind is skipped by load


def _key(text: str) -> str:
    """An object-name-safe key of an id: its UTF-8 in hex, or, for ids whose hex would make
    names too long for a file system (255 bytes), HASHED_NAME and the SHA-256 of it."""
    encoded = text.encode().hex()
    if len(encoded) <= HEX_KEY_CHARS_MAX:
        return encoded
    return _hashed(text)


def _hashed(text: str) -> str:
    return HASHED_NAME + hashlib.sha256(text.encode()).hexdigest()


# Group entries name two ids: both hashed, so any two fit (131 characters).
def _group_prefix(group_id: str) -> str:
    return _hashed(group_id) + "."


def _group_entry(group_id: str, transactional_id: str) -> str:
    return _group_prefix(group_id) + _hashed(transactional_id)


def _prefix(transactional_id: str) -> str:
    return _key(transactional_id) + "."


def _name(transactional_id: str, sequence: int) -> str:
    return f"{_prefix(transactional_id)}{sequence:0{_SEQUENCE_DIGITS}d}.json"


def _transactional_id(name: str) -> str | None:
    encoded, _, rest = name.partition(".")
    if not rest.endswith(".json"):
        return None
    try:
        return bytes.fromhex(encoded).decode()
    except ValueError:
        return None


def _listed(store: Store, prefix: str) -> list[StoredObject]:
    """The objects whose names start with `prefix`, sorted (one listing from the prefix on).

    Raises:
        StorageUnavailable: the store could not be listed.
    """
    try:
        return store.list_prefixed(prefix)
    except FileNotFoundError:
        return []
    except OSError as error:
        raise StorageUnavailable(f"Cannot list transaction states ({prefix!r}): {error}") from None
