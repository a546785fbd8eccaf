"""A partition's write lease for tools and jobs (retention, compaction, repairs).

Every commit to a partition table must come from the partition's leader (FORMAT.md §7). A job
takes leadership for the time of its change, under a node id of its own, and gives it back to
the previous leader when it is done:

    with partition_lease(root, "orders", 0, node_id=JOB_NODE_ID) as log:
        ...commit with log (or with Spark, while the lease is held)...

While the lease is held the job renews a liveness record, so gateways neither take the
partition back nor forward writes to it; producers see retriable errors for that time. A
gateway that still believed it led is fenced by the `leader` txn on its next append and
re-takes the partition after the job hands it back.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator

from storage_layout import paths
from storage_layout.cluster.nodes import NodeRecord, NodeRegistry
from storage_layout.errors import LeadershipConflict
from storage_layout.log import DeltaPartitionLog, Leadership

# Node ids from here up are for jobs and tools; gateways use ids below it.
JOB_NODE_ID_MIN = 60_000
JOB_HEARTBEAT_MS = 500


class _Heartbeat(threading.Thread):
    """Renews the job's liveness record until stopped."""

    def __init__(self, registry: NodeRegistry, node_id: int, url: str, interval_ms: int) -> None:
        super().__init__(name=f"lakelog-lease-{node_id}", daemon=True)
        self._registry = registry
        self._node_id = node_id
        self._url = url
        self._interval_s = interval_ms / 1000
        self._incarnation = uuid.uuid4().hex
        self._count = 0
        self.stopped = threading.Event()

    def beat(self) -> None:
        self._count += 1
        record = NodeRecord(self._node_id, self._url, self._count, self._incarnation)
        self._registry.write(record)

    def run(self) -> None:
        while not self.stopped.wait(self._interval_s):
            try:
                self.beat()
            except OSError:
                continue  # the lease holder's commits are fenced anyway if this stalls too long


@contextlib.contextmanager
def partition_lease(
    root: str,
    topic: str,
    partition: int,
    *,
    node_id: int,
    heartbeat_ms: int = JOB_HEARTBEAT_MS,
) -> Iterator[DeltaPartitionLog]:
    """Hold the partition's leadership for the `with` block; hand it back afterwards.

    Yields the partition's log with the leadership held: its appends assert it, and other
    engines may commit to the table while the block runs.

    Raises:
        ValueError: `node_id` is below JOB_NODE_ID_MIN (reserved for gateways).
        LeadershipConflict: another node changed the leader at the same moment; retry.
    """
    if node_id < JOB_NODE_ID_MIN:
        raise ValueError(f"job node ids start at {JOB_NODE_ID_MIN} (gateways use lower ids)")
    root = paths.normalize_root(root)
    registry = NodeRegistry(root)
    heartbeat = _Heartbeat(registry, node_id, f"job://{node_id}", heartbeat_ms)
    heartbeat.beat()
    heartbeat.start()
    try:
        log = DeltaPartitionLog.open(paths.partition_table_uri(root, topic, partition))
        previous = log.leader()
        held = log.commit_leadership(node_id, expected=previous, hold=True)
        try:
            yield log
        finally:
            _hand_back(log, previous, held)
    finally:
        heartbeat.stopped.set()
        heartbeat.join()
        registry.remove(node_id)  # gateways see the job gone at once and resume


def _hand_back(log: DeltaPartitionLog, previous: Leadership | None, held: Leadership) -> None:
    """Give the partition back to the leader it had, so that node resumes at once."""
    if previous is None:
        return  # never led: with the job's record removed, the preferred gateway takes it
    try:
        log.commit_leadership(previous.node_id, expected=held, hold=False)
    except LeadershipConflict:
        pass  # someone already took it over: nothing to give back
