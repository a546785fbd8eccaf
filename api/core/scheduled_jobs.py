"""Maintenance inside the gateway: retention, key compaction, file optimization and vacuum on
their intervals (LAKELOG_*_INTERVAL_MS, as `lakelog jobs schedule`), without a separate
process. Off with LAKELOG_MAINTENANCE=false or `lakelog serve --no-maintenance`.

Each node runs the jobs for the partitions whose preferred node it is (the same rule that
places leadership), so with a stable membership each partition's work is done once across the
cluster. If two nodes ever overlap (a membership change mid-run), nothing breaks: every job
plans from the table and commits with the version CAS, so the second one finds the work done.
A partition's commit is followed by a catch-up of its writer on this node, so fetches see what
the table holds at once rather than at the next foreign-commit check.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from api.core import metrics
from conf.settings import Settings
from storage_layout.maintenance.execute import Outcome, Unit
from storage_layout.maintenance.jobs import JOBS, execute_unit, summarize
from storage_layout.meta.catalog import TopicInfo

log = logging.getLogger("lakelog.maintenance")

RUNS_KEPT = 200  # the most recent per-partition outcomes this node remembers


@dataclass(frozen=True, slots=True)
class PartitionRun:
    """One job's outcome on one partition, as this node ran it."""

    job: str
    topic: str
    partition: int
    node_id: int
    finished_ms: int
    committed: bool
    records_removed: int
    bytes_removed: int
    files_deleted: int
    error: str | None


class ScheduledJobs:
    """Runs each maintenance job when due over this node's partitions, one at a time."""

    def __init__(
        self,
        *,
        root: str,
        settings: Settings,
        node_id: int,
        topics: Callable[[], Awaitable[list[TopicInfo]]],
        preferred: Callable[[str, int], int],
        blocking: Callable[..., Awaitable],
        committed: Callable[[str, int], Awaitable[None]],
    ) -> None:
        self._root = root
        self._settings = settings
        self._node_id = node_id
        self._topics = topics
        self._preferred = preferred
        self._blocking = blocking
        self._committed = committed
        self.recent: collections.deque[PartitionRun] = collections.deque(maxlen=RUNS_KEPT)
        # Runs that changed something or failed, kept apart: the many runs with nothing to do
        # would push them out of `recent` within minutes.
        self.recent_changes: collections.deque[PartitionRun] = collections.deque(maxlen=RUNS_KEPT)

    async def run_forever(self) -> None:
        """Each job first one interval after start (a restart does not redo the work of the
        node that ran just before), then on its interval; a failed run is retried next time."""
        intervals = self._settings.maintenance_intervals_ms()
        started = time.monotonic()
        due = {job: started + intervals[job] / 1000 for job in JOBS}
        while True:
            await asyncio.sleep(max(0.0, min(due.values()) - time.monotonic()))
            for job in JOBS:
                if due[job] <= time.monotonic():
                    await self.run_once(job)
                    due[job] = time.monotonic() + intervals[job] / 1000

    async def run_once(self, job: str) -> None:
        """One run of `job` over the partitions this node is the preferred node of."""
        units = [
            Unit(self._root, topic.name, partition)
            for topic in await self._topics()  # read afresh: topics made on other nodes too
            for partition in range(topic.partitions)
            if self._preferred(topic.name, partition) == self._node_id
        ]
        if not units:
            return
        begun = time.monotonic()
        now_ms = int(time.time() * 1000)
        outcomes = []
        for count, unit in enumerate(units, start=1):
            outcome = await self._run_unit(job, unit, now_ms)
            outcomes.append(outcome)
            self._report(job, outcome, f"[{count}/{len(units)}]")
            if outcome.committed and job != "vacuum":
                await self._committed(unit.topic, unit.partition)
        summary = summarize(job, outcomes, begun)
        if summary.failed or summary.records_removed or summary.files_deleted:
            log.info("%s (node %s)", summary.line(), self._node_id)

    async def _run_unit(self, job: str, unit: Unit, now_ms: int) -> Outcome:
        try:
            return await self._blocking(
                execute_unit,
                job,
                unit,
                now_ms=now_ms,
                dry_run=False,
                vacuum_retention_ms=self._settings.vacuum_retention_ms,
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - execute_unit reports most failures itself
            return Outcome(
                job=job, topic=unit.topic, partition=unit.partition, lines=(), error=repr(error)
            )

    def _report(self, job: str, outcome: Outcome, progress: str) -> None:
        result = "failed" if outcome.error else "committed" if outcome.committed else "nothing"
        metrics.JOB_RUNS.labels(job, result).inc()
        metrics.JOB_RECORDS_REMOVED.labels(job).inc(outcome.records_removed)
        metrics.JOB_BYTES_REMOVED.labels(job).inc(outcome.bytes_removed)
        run = PartitionRun(
            job=job,
            topic=outcome.topic,
            partition=outcome.partition,
            node_id=self._node_id,
            finished_ms=int(time.time() * 1000),
            committed=outcome.committed,
            records_removed=outcome.records_removed,
            bytes_removed=outcome.bytes_removed,
            files_deleted=outcome.files_deleted,
            error=outcome.error,
        )
        self.recent.append(run)
        if run.committed or run.error:
            self.recent_changes.append(run)
        where = f"{outcome.topic}-{outcome.partition}"
        if outcome.error:
            log.warning("%s %s %s: FAILED: %s", job, progress, where, outcome.error)
        elif outcome.committed:
            for line in outcome.lines:
                log.info("%s %s %s", job, progress, line)
            log.info("%s %s %s: done in %s ms", job, progress, where, outcome.elapsed_ms)
