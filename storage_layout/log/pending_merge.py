"""The small-file merge housekeeping prepared and the writer has not committed yet.

Housekeeping (its own thread) writes the merged file; the writer commits its actions with its
next append, or alone when idle: committing it from housekeeping would race the appends for
every version (storage_layout/log/housekeeping.py).
"""

from __future__ import annotations

from storage_layout.errors import StorageError
from storage_layout.log.files import delete_uncommitted
from storage_layout.log.housekeeping import Housekeeper, PreparedMerge
from storage_layout.log.snapshot import LogSnapshot
from storage_layout.store import Store


class PendingMerge:
    """At most one prepared merge: set by the housekeeping thread, taken by the writer's."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.merge: PreparedMerge | None = None

    def prepare(self, housekeeper: Housekeeper, snapshot: LogSnapshot) -> int:
        """Have `housekeeper` write the merged file of the first run of small files in
        `snapshot`, unless a merge is pending already; the number of files it replaces."""
        if self.merge is not None:
            return 0
        try:
            merge = housekeeper.prepare_merge(snapshot)
        except (OSError, StorageError):
            return 0  # retried on the next pass
        if merge is None:
            return 0
        self.merge = merge
        return len(merge.removed_paths)

    def taken(self, merge: PreparedMerge | None) -> None:
        """`merge` was committed (with an append): it is no longer pending."""
        if merge is not None and self.merge is merge:
            self.merge = None

    def usable(self, snapshot: LogSnapshot) -> PreparedMerge | None:
        """The pending merge if its files are all still live in `snapshot` (retention or
        compaction may have removed some since: then it is dropped and its file deleted)."""
        merge = self.merge
        if merge is None:
            return None
        live = {f.path for f in snapshot.files}
        if merge.removed_paths <= live:
            return merge
        self.discard(merge)
        return None

    def discard(self, merge: PreparedMerge) -> None:
        """Drop `merge` (not committed) and delete its file."""
        self.taken(merge)
        delete_uncommitted(self._store, [merge.written])

    def forget_if_committed(self, snapshot: LogSnapshot) -> None:
        """After a reload: the merge is no longer pending if `snapshot` holds its file."""
        merge = self.merge
        if merge is not None and any(
            f.path == merge.written.data_file.path for f in snapshot.files
        ):
            self.merge = None
