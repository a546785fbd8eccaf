"""The one storage interface below the log: what lakelog needs from a disk or a bucket.

Like Delta's `LogStore` and LevelDB's `Env`: every byte lakelog itself writes or reads under a
storage root goes through a `Store` (Delta commits, Parquet files, node records), and each kind
of store says once how it makes a write exclusive. The commit primitive is `put_if_absent`:
`_delta_log/<version>.json` is created only if no writer created it first, so two writers can
never both commit a version (FORMAT.md §3). delta-rs makes its own commits the same way (hard
link locally, conditional PUT on object stores), so the two interoperate on one table.

Paths are relative to the store's root and use "/" on every store.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True, slots=True)
class StoredObject:
    """One object (file) found by `Store.list`: its name within the listed directory."""

    name: str
    size_bytes: int
    modified_ms: int


class StoreError(OSError):
    """A store request failed for a reason that may pass (network, throttling, 5xx): the
    caller answers "retriable". Subclass of OSError so that I/O handling covers it."""


class StoreAccessDenied(StoreError):
    """The store refused the credentials (wrong key, missing permission): not retriable."""


class StoreNotFound(StoreError):
    """The bucket or container does not exist."""


class Store(ABC):
    """A storage root: a local directory or a bucket prefix. Thread-safe."""

    #: Which implementation (local, local-exclusive-create, s3, azure, gcs).
    kind: str
    #: The root as a URI (a local path for local stores).
    uri: str

    @abstractmethod
    def child(self, relative: str) -> Store:
        """The store rooted at `relative` below this one (sharing its connections)."""

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Create `path` holding `data`; False, with nothing written, if it exists.

        Readers see the object whole or not at all. A create whose answer was lost and that
        finds `path` holding exactly `data` counts as created (every caller's payload is
        unique: it names a fresh data file or carries a fresh id).
        """

    @abstractmethod
    def put(self, path: str, data: bytes) -> None:
        """Write `path`, replacing any object there; readers see the old or the new whole."""

    def put_new(self, path: str, data: bytes) -> None:
        """Write an object under a fresh name that no reader looks for until a commit names
        it (a data file's random name). A store may skip what makes `put` whole for readers
        (a local disk's temporary file and rename): a crash can leave the object partial, and
        unreferenced, as a lost commit leaves its file."""
        self.put(path, data)

    @abstractmethod
    def get(self, path: str) -> bytes | None:
        """The bytes of `path`, or None if it does not exist."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Whether `path` exists (one metadata request on object stores)."""

    @abstractmethod
    def list(self, directory: str = "") -> list[StoredObject]:
        """The objects directly in `directory` (not below it), sorted by name; [] if none."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Delete `path`; a missing one is fine."""

    def list_after(self, start_after: str, directory: str = "") -> list[StoredObject]:
        """The objects in `directory` named after `start_after`, sorted (object stores start
        the listing there: a `_delta_log` keeping an hour of commits is not read whole)."""
        return [item for item in self.list(directory) if item.name > start_after]

    def list_below(self, bound: str, directory: str = "") -> list[StoredObject]:
        """The objects in `directory` named before `bound`, sorted (object stores stop the
        listing there)."""
        return [item for item in self.list(directory) if item.name < bound]

    def list_prefixed(self, prefix: str, directory: str = "") -> list[StoredObject]:
        """The objects in `directory` whose names start with `prefix`, sorted (object stores
        start the listing at the prefix and stop after it)."""
        return [item for item in self.list(directory) if item.name.startswith(prefix)]

    def delete_many(self, paths: list[str]) -> None:
        """Delete each of `paths` (missing ones are fine); object stores take them in bulk
        (one request per thousand on S3)."""
        for path in paths:
            self.delete(path)

    @abstractmethod
    def delete_tree(self, directory: str = "") -> None:
        """Delete everything at and below `directory`; missing is fine."""

    def list_temporaries(self, directory: str = "") -> list[StoredObject]:
        """Leftovers of writes that crashed before publishing (local stores only)."""
        return []

    @abstractmethod
    def open_input(self, path: str) -> pa.NativeFile:
        """A seekable Arrow file for reading `path` (Parquet readers take it).

        Raises:
            FileNotFoundError: there is no such object.
        """


def holds(store: Store, path: str, data: bytes) -> bool:
    """Whether `path` exists holding exactly `data` (an earlier attempt of this very write)."""
    return store.get(path) == data
