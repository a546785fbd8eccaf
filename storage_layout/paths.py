"""Where things live under a storage root. Roots are local paths or object-store URIs."""

from __future__ import annotations

import os

META_DIR = "_meta"
TOPICS_DIR = "topics"


def is_local(root: str) -> bool:
    return "://" not in root or root.startswith("file://")


def normalize_root(root: str) -> str:
    """An absolute local path, or the URI unchanged (without a trailing slash)."""
    if root.startswith("file://"):
        root = root[len("file://") :]
    if is_local(root):
        return os.path.abspath(os.path.expanduser(root))
    return root.rstrip("/")


def join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


def topic_dir(root: str, topic: str) -> str:
    return join(root, TOPICS_DIR, topic)


def partition_table_uri(root: str, topic: str, partition: int) -> str:
    """`<root>/topics/<topic>/<partition>`: one Delta table per topic partition."""
    return join(root, TOPICS_DIR, topic, str(partition))


def meta_table_uri(root: str, name: str) -> str:
    """`<root>/_meta/<name>`: the metadata tables and objects (FORMAT.md §1)."""
    return join(root, META_DIR, name)
