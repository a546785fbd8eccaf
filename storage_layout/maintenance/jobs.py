"""The maintenance jobs by name, run on one topic partition: what every engine runs (Spark
tasks in jobs/runner.py, a node's scheduler, `--engine local`), and their summary."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from storage_layout.maintenance import execute, plans
from storage_layout.maintenance.execute import Outcome, Unit

JOBS = ("retention", "compact-keys", "optimize-files", "vacuum")


@dataclass(frozen=True, slots=True)
class Summary:
    job: str
    partitions: int
    failed: int
    segments: int
    bytes_removed: int
    records_removed: int
    records_kept: int
    files_deleted: int
    elapsed_ms: int

    def line(self) -> str:
        return (
            f"{self.job}: {self.partitions} partitions, {self.segments} segments, "
            f"{plans.format_bytes(self.bytes_removed)} and {self.records_removed} records removed, "
            f"{self.records_kept} records kept, {self.files_deleted} files vacuumed, "
            f"{self.failed} failed, {self.elapsed_ms / 1000:.1f} s"
        )


def execute_unit(
    job: str, unit: Unit, *, now_ms: int, dry_run: bool, vacuum_retention_ms: int
) -> Outcome:
    """Run `job` on one partition; a failure becomes the outcome (the others go on)."""
    try:
        if job == "retention":
            return execute.run_retention(unit, now_ms=now_ms, dry_run=dry_run)
        if job == "compact-keys":
            return execute.run_compact_keys(unit, now_ms=now_ms, dry_run=dry_run)
        if job == "optimize-files":
            return execute.run_optimize_files(unit, now_ms=now_ms, dry_run=dry_run)
        return execute.run_vacuum(unit, retention_ms=vacuum_retention_ms, dry_run=dry_run)
    except Exception as error:  # reported per partition; the job's exit code says it failed
        failed = Outcome(job=job, topic=unit.topic, partition=unit.partition, lines=())
        return replace(failed, error=f"{type(error).__name__}: {error}")


def summarize(job: str, outcomes: list[Outcome], started: float) -> Summary:
    return Summary(
        job=job,
        partitions=len(outcomes),
        failed=sum(1 for o in outcomes if o.error),
        segments=sum(o.segments for o in outcomes),
        bytes_removed=sum(o.bytes_removed for o in outcomes),
        records_removed=sum(o.records_removed for o in outcomes),
        records_kept=sum(o.records_kept for o in outcomes),
        files_deleted=sum(o.files_deleted for o in outcomes),
        elapsed_ms=int((time.monotonic() - started) * 1000),
    )
