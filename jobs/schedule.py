"""`lakelog jobs schedule`: every maintenance job on its own interval, in this process.

The local counterpart of the Databricks jobs' cron schedules (conf/databricks/*.job.yml):
retention and key compaction every 5 minutes (Kafka's log.retention.check.interval.ms; every 15
minutes on Databricks, where a run also pays for its compute), file optimization hourly, vacuum
daily, each configurable (LAKELOG_RETENTION_INTERVAL_MS, LAKELOG_COMPACT_KEYS_INTERVAL_MS,
LAKELOG_OPTIMIZE_FILES_INTERVAL_MS, LAKELOG_VACUUM_INTERVAL_MS). A job that fails is logged and
runs again at its next interval; the jobs plan from the tables each time, so nothing is lost by
a missed run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from conf.settings import Settings
from jobs.runner import JobRequest, run_job


def run_schedule(
    settings: Settings,
    base: JobRequest,
    *,
    stop: threading.Event,
    out: Callable[[str], None] = print,
) -> None:
    """Run each job when due (all at once first) until `stop` is set."""
    intervals = settings.maintenance_intervals_ms()
    due = dict.fromkeys(intervals, time.monotonic())
    while not stop.is_set():
        now = time.monotonic()
        for job, interval_ms in intervals.items():
            if due[job] <= now:
                _run_once(JobRequest(**{**_fields(base), "job": job}), out)
                due[job] = time.monotonic() + interval_ms / 1000
        stop.wait(max(0.0, min(due.values()) - time.monotonic()))


def _run_once(request: JobRequest, out: Callable[[str], None]) -> None:
    try:
        run_job(request, out=out)
    except Exception as error:  # the next interval tries again
        out(f"{request.job}: FAILED: {type(error).__name__}: {error}")


def _fields(request: JobRequest) -> dict:
    return {name: getattr(request, name) for name in request.__slots__}
