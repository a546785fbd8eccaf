"""Per-group configs (Kafka's GROUP config resource): `_meta/group_configs`, a `DocumentTable`
of kind `group` whose document is a group's own settings, `{name: value}` as strings, and of
kind `share-group` for each share group that exists (FORMAT.md §20). A group without a
document uses the defaults. The rules for names and values are the node's
(api/core/group_configs.py); this is only where they are kept.

Concurrency contract: as `DocumentTable`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from storage_layout.meta.documents import DocumentTable, DocumentView, Write

GROUP_CONFIGS_TABLE = "group_configs"
KIND_GROUP = "group"
# A share group that exists (it had a member, or an administrator set its offsets): Kafka keeps
# such a group, empty, until it is deleted. Document: {"created_ms": <when>}.
KIND_SHARE_GROUP = "share-group"


class GroupConfigStore:
    """Every group's own config settings."""

    def __init__(self, root: str) -> None:
        self.table = DocumentTable(root, GROUP_CONFIGS_TABLE)

    def refresh(self) -> bool:
        """Read what other nodes stored; True if anything changed."""
        return self.table.refresh()

    def all(self) -> dict[str, dict[str, str]]:
        """Each group's settings, as last refreshed."""
        return self.table.documents(KIND_GROUP)

    def share_groups(self) -> list[str]:
        """The share groups that exist, as last refreshed."""
        return sorted(self.table.documents(KIND_SHARE_GROUP))

    def set_share_group(self, group_id: str, exists: bool, created_ms: int = 0) -> None:
        """Record that a share group exists (once), or that it was deleted.

        Raises:
            StorageUnavailable: the table could not be read or written.
        """
        if exists:
            self.table.put(KIND_SHARE_GROUP, group_id, {"created_ms": created_ms}, create_only=True)
        else:
            self.table.put(KIND_SHARE_GROUP, group_id, None)

    def change(
        self, group_id: str, decide: Callable[[Mapping[str, str]], Mapping[str, str] | None]
    ) -> dict[str, str]:
        """Replace `group_id`'s settings with what `decide` makes of the latest ones (None:
        leave them); an empty result deletes the document. Returns the settings after.

        Raises:
            StorageUnavailable: the table could not be read or written.
        """
        outcome: dict[str, str] = {}

        def writes(view: DocumentView) -> list[Write] | None:
            current = view.get(KIND_GROUP, group_id) or {}
            wanted = decide(current)
            outcome.clear()
            outcome.update(current if wanted is None else wanted)
            if wanted is None or dict(wanted) == current:
                return None
            return [Write(KIND_GROUP, group_id, dict(wanted) or None)]

        self.table.transact(writes)
        return dict(outcome)
