"""The node-to-node routes: every path one node calls on another, defined once. The HTTP
front-end mounts them (api/http/routes/internal.py); the callers build URLs from them through
NodeClient; route_rules marks them node-only. Not part of the public API.

A request crosses at most one hop: the node that serves one never forwards it again.
"""

from __future__ import annotations

PREFIX = "/_lakelog/internal/"

# A partition's records for its leader: from a node that does not lead it, and from Spark
# executors writing into a topic a live node leads (every writer commits as the leader or
# hands its change to the leader).
APPEND_PATH = PREFIX + "topics/{topic}/partitions/{partition}/append"
# A transaction marker for the partition's leader (FORMAT.md §14).
MARKER_PATH = PREFIX + "topics/{topic}/partitions/{partition}/marker"
# A transactional producer's request for its transactional id's coordinator (one route for
# every operation).
TRANSACTION_PATH = PREFIX + "transactions/{operation}"
# A committed transaction's offsets for the group's coordinator (FORMAT.md §15).
TRANSACTION_OFFSETS_PATH = PREFIX + "groups/{group}/transaction-offsets"
# A share group's acquisition and acknowledgements for the topic partition's leader, where
# its share partition lives (HTTP queue consumption served by any node). The group id is in
# the body: any string is one, and a path cannot carry every string.
SHARE_ACQUIRE_PATH = PREFIX + "shares/topics/{topic}/partitions/{partition}/acquire"
SHARE_ACKNOWLEDGE_PATH = PREFIX + "shares/topics/{topic}/partitions/{partition}/acknowledge"
# An administrator's reset (alter or delete a share group's offsets) for the partition's leader.
SHARE_RESET_PATH = PREFIX + "shares/topics/{topic}/partitions/{partition}/reset"
# The groups a node coordinates (the cluster-wide group list asks every node).
GROUPS_PATH = PREFIX + "groups"

# A public read route a node asks of a partition's leader (bounds, offsets by timestamp): the
# Confluent v2 offsets route, answered by any node, exact only on the leader.
PARTITION_OFFSETS_PATH = "/topics/{topic}/partitions/{partition}/offsets"

ALL_PATHS = (
    ("POST", APPEND_PATH),
    ("POST", MARKER_PATH),
    ("POST", TRANSACTION_PATH),
    ("POST", TRANSACTION_OFFSETS_PATH),
    ("GET", GROUPS_PATH),
    ("POST", SHARE_ACQUIRE_PATH),
    ("POST", SHARE_ACKNOWLEDGE_PATH),
    ("POST", SHARE_RESET_PATH),
)


def append_path(topic: str, partition: int) -> str:
    return APPEND_PATH.format(topic=topic, partition=partition)


def marker_path(topic: str, partition: int) -> str:
    return MARKER_PATH.format(topic=topic, partition=partition)


def transaction_path(operation: str) -> str:
    return TRANSACTION_PATH.format(operation=operation)


def transaction_offsets_path(group: str) -> str:
    return TRANSACTION_OFFSETS_PATH.format(group=group)


def partition_offsets_path(topic: str, partition: int) -> str:
    return PARTITION_OFFSETS_PATH.format(topic=topic, partition=partition)


def share_path(path: str, topic: str, partition: int) -> str:
    return path.format(topic=topic, partition=partition)
