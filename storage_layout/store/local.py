"""Local-disk stores: a directory, with hard links or (FUSE mounts) exclusive creates."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import uuid

import pyarrow as pa

from storage_layout.store.base import Store, StoredObject, holds
from storage_layout.store.stats import counted

# Temporary names of whole-object writes, published by link or rename. Listings skip them;
# a crash between the write and the publish leaves one, trimmed by housekeeping.
TEMPORARY_PREFIX = "_commit_"
TEMPORARY_SUFFIX = ".tmp"
# errno values of a file system that cannot hard-link (FUSE mounts such as /Volumes and /dbfs,
# some network file systems).
_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV}


class LocalStore(Store):
    """A local directory. put_if_absent writes a temporary file and hard-links it to its name:
    the link fails if the name exists, and readers see the file whole (delta-rs does the same).
    """

    kind = "local"

    def __init__(self, root: str) -> None:
        self.uri = root

    def child(self, relative: str) -> Store:
        return type(self)(os.path.join(self.uri, relative))

    def _full(self, path: str) -> str:
        return os.path.join(self.uri, path) if path else self.uri

    def _write_temporary(self, path: str, data: bytes) -> str:
        directory = os.path.dirname(self._full(path))
        temporary = os.path.join(
            directory, f"{TEMPORARY_PREFIX}{uuid.uuid4().hex}{TEMPORARY_SUFFIX}"
        )
        _write_creating_directory(temporary, data)
        return temporary

    @counted("put_if_absent")
    def put_if_absent(self, path: str, data: bytes) -> bool:
        temporary = self._write_temporary(path, data)
        try:
            os.link(temporary, self._full(path))
        except FileExistsError:
            return holds(self, path, data)
        finally:
            with contextlib.suppress(OSError):  # a leftover temporary is trimmed later
                os.unlink(temporary)
        return True

    @counted("put")
    def put(self, path: str, data: bytes) -> None:
        temporary = self._write_temporary(path, data)
        os.replace(temporary, self._full(path))

    @counted("put")
    def put_new(self, path: str, data: bytes) -> None:
        _write_creating_directory(self._full(path), data)

    @counted("get")
    def get(self, path: str) -> bytes | None:
        try:
            with open(self._full(path), "rb") as source:
                return source.read()
        except FileNotFoundError:
            return None

    @counted("head")
    def exists(self, path: str) -> bool:
        return os.path.exists(self._full(path))

    def list(self, directory: str = "") -> list[StoredObject]:
        return self._listed(directory, lambda name: True)

    def list_after(self, start_after: str, directory: str = "") -> list[StoredObject]:
        return self._listed(directory, lambda name: name > start_after)

    def list_below(self, bound: str, directory: str = "") -> list[StoredObject]:
        return self._listed(directory, lambda name: name < bound)

    def list_prefixed(self, prefix: str, directory: str = "") -> list[StoredObject]:
        return self._listed(directory, lambda name: name.startswith(prefix))

    @counted("list")
    def _listed(self, directory: str, wanted) -> list[StoredObject]:
        """The files in `directory` whose names are `wanted`, sorted; only those are
        stat'ed (a `_delta_log` keeping an hour of commits holds hundreds of thousands)."""
        try:
            entries = list(os.scandir(self._full(directory)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = []
        for entry in entries:
            if is_temporary(entry.name) or not wanted(entry.name):
                continue
            try:
                if not entry.is_file():
                    continue
                info = entry.stat()
            except FileNotFoundError:
                continue  # deleted while listing
            found.append(StoredObject(entry.name, info.st_size, info.st_mtime_ns // 1_000_000))
        return sorted(found, key=lambda item: item.name)

    def list_temporaries(self, directory: str = "") -> list[StoredObject]:
        """Leftover temporaries in `directory` (a writer crashed between write and publish)."""
        try:
            entries = [e for e in os.scandir(self._full(directory)) if is_temporary(e.name)]
        except FileNotFoundError:
            return []
        found = []
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                info = entry.stat()
                found.append(StoredObject(entry.name, info.st_size, info.st_mtime_ns // 1_000_000))
        return found

    @counted("delete")
    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._full(path))

    def delete_tree(self, directory: str = "") -> None:
        shutil.rmtree(self._full(directory), ignore_errors=True)

    def open_input(self, path: str) -> pa.NativeFile:
        return pa.OSFile(self._full(path))


class ExclusiveCreateStore(LocalStore):
    """A local directory on a file system without hard links (FUSE mounts: Unity Catalog
    Volumes, /dbfs). put_if_absent creates the name with O_CREAT|O_EXCL, which such file
    systems still make exclusive, then writes and syncs the bytes.

    The price: between the create and the write a reader can see the file empty or short. The
    payload goes in one write; a reader that catches a commit mid-write cannot parse it and
    answers "retry" (log_commit.read_commit raises StoreError), and the retry sees it whole.
    """

    kind = "local-exclusive-create"

    @counted("put_if_absent")
    def put_if_absent(self, path: str, data: bytes) -> bool:
        full = self._full(path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        try:
            descriptor = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return holds(self, path, data)
        try:
            os.write(descriptor, data)
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        return True


def _write_creating_directory(full: str, data: bytes) -> None:
    """Create file `full` (it must not exist) holding `data`; its directory is made only when
    missing (a check per write costs as much as the write on a small file)."""
    try:
        out = open(full, "xb")  # noqa: SIM115 - closed below, after the one retry
    except FileNotFoundError:
        os.makedirs(os.path.dirname(full), exist_ok=True)
        out = open(full, "xb")  # noqa: SIM115
    try:
        with out:
            out.write(data)
    except BaseException:
        # A write cut short (a full disk) must not leave its part behind: nothing names it,
        # so nothing would ever delete it, and the next merge's part would fill the disk again.
        with contextlib.suppress(OSError):
            os.unlink(full)
        raise


def is_temporary(name: str) -> bool:
    return name.startswith(TEMPORARY_PREFIX) and name.endswith(TEMPORARY_SUFFIX)


def supports_hard_links(directory: str) -> bool:
    """Probe once whether `directory`'s file system can hard-link (creates it if missing)."""
    os.makedirs(directory, exist_ok=True)
    probe = os.path.join(directory, f"{TEMPORARY_PREFIX}probe-{uuid.uuid4().hex}{TEMPORARY_SUFFIX}")
    linked = probe + ".link"
    try:
        with open(probe, "wb"):
            pass
        os.link(probe, linked)
    except OSError as error:
        if error.errno in _NO_HARD_LINKS:
            return False
        raise
    finally:
        for name in (probe, linked):
            with contextlib.suppress(OSError):
                os.unlink(name)
    return True
