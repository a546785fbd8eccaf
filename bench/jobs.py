"""Maintenance jobs: retention time vs segments deleted and vs history; key compaction rate.

Cases (every job runs as `run_job(JobRequest(job, root, (topic,), engine="local"))`, planning +
I/O + commit, on a prebuilt one-partition topic, restored after each run):

  retention     A partition of H segments, one file each (segment.bytes = 14: every append opens
                a new segment), whose record timestamps (CreateTime) grow by 1 h per segment;
                retention.ms is set so that exactly the D oldest closed segments are expired.
                Series 1: H in --history (default 100, 1000, 4000) with D = --deletable (50).
                Series 2: D in --deletable-series (10, 100, 1000) with H = the largest history.
                Baseline of the same round, on the same table just before the job: a plain
                `DeltaTable(uri)` load, and `DeltaPartitionLog.open(uri)` (load + file index);
                "job / open" is what the job costs on top of loading the partition once.
  compact-keys  A compacted topic (cleanup.policy=compact, min.compaction.lag.ms=0) of --records
                records (1M) with --value-bytes (100) random values and keys drawn uniformly from
                K distinct keys (--keys: 10k, 100k), in closed segments of --segment-records
                (50k) records, one file each, plus a one-record active segment. Baseline of the
                same round: `DeltaPartitionLog.read_files(files)` of the same closed files (pyarrow
                reading them, nothing else); "job / read" is the compaction's overhead over I/O.

Each point runs --repeats times (3); tables show medians and every run; a ratio is the median
of the per-run ratios (job and baseline of the same run). Wall and CPU time (this process, all
threads) are both shown: on a shared machine CPU time is the steadier. The partition is built
with `DeltaPartitionLog.append` (housekeeping every 32 commits, as the gateway's writer:
small-file merges, a checkpoint every 100 versions; retention tables get a last checkpoint at
their last version). Every run starts from the same table, its files in the page cache: a
retention run's only change, its commit file, is removed afterwards (checked); compaction runs
on a fresh hard-link copy. Every job is verified: the segments it deleted, the records it kept,
and the partition reopened afterwards.

Each point starts with an untimed warm-up run (imports, allocator, caches); one more run after
the timed ones has phase timers (DeltaTable loads, file-index builds, catalog reads, planning,
reads, writes, the reload after the commit) for the breakdown tables; --profile also runs
cProfile on the largest retention and compaction points.

Usage: .venv/bin/python bench/jobs.py [--history 100,1000,4000] [--deletable 50]
           [--deletable-series 10,100,1000] [--records 1000000] [--keys 10000,100000]
           [--repeats 3] [--profile] [--only retention|compact-keys] [--json out.json]
Progress goes to stderr, the results tables to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from deltalake import DeltaTable

REPO = Path(__file__).resolve().parent.parent
# This file is bench/jobs.py: with bench/ on the path, `import jobs` would import it, not the
# repository's jobs package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO / "bench"]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.produce_fetch import machine_info, report_header  # noqa: E402
from jobs.runner import ENGINE_LOCAL, JobRequest, run_job  # noqa: E402
from storage_layout import paths  # noqa: E402
from storage_layout.log import (  # noqa: E402
    DeltaPartitionLog,  # noqa: E402
    load_table,
    log_commit,  # noqa: E402
    partition_log,
)
from storage_layout.log import reader as log_reader  # noqa: E402
from storage_layout.maintenance import execute, plans  # noqa: E402
from storage_layout.maintenance.jobs import Summary  # noqa: E402
from storage_layout.meta.catalog import TopicCatalog  # noqa: E402
from storage_layout.records import NewRecord  # noqa: E402
from storage_layout.store.local import LocalStore  # noqa: E402
from storage_layout.topic_config import TopicConfig  # noqa: E402

TOPIC = "bench"
SEGMENT_BYTES_MIN = 14  # TopicConfig's minimum: every append rolls a new segment
SEGMENT_STEP_MS = 3_600_000  # record timestamps grow by this much per segment (retention)
HOUSEKEEPING_EVERY_COMMITS = 32  # as the gateway's writer (api/core/writer.py)
DEFAULT_HISTORY = "100,1000,4000"
DEFAULT_DELETABLE = 50
DEFAULT_DELETABLE_SERIES = "10,100,1000"
DEFAULT_RETENTION_SEGMENT_RECORDS = 10
DEFAULT_RECORDS = 1_000_000
DEFAULT_KEYS = "10000,100000"
DEFAULT_SEGMENT_RECORDS = 50_000
DEFAULT_VALUE_BYTES = 100
DEFAULT_REPEATS = 3
PROFILE_LINES = 25


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# ---- CPU of this process and of the rest of the machine --------------------------------------

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def system_busy_cpu_s() -> float:
    """Busy (non-idle, non-iowait) CPU time of the whole machine, in seconds."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:9]]
    return (sum(values) - values[3] - values[4]) / _CLK_TCK


@contextlib.contextmanager
def measured(into: dict[str, float]) -> Iterator[None]:
    """Wall seconds, this process's CPU seconds and every other process's CPU seconds."""
    wall, own, busy = time.perf_counter(), time.process_time(), system_busy_cpu_s()
    try:
        yield
    finally:
        into["seconds"] = time.perf_counter() - wall
        into["cpu_s"] = time.process_time() - own
        into["other_cpu_s"] = max(0.0, system_busy_cpu_s() - busy - into["cpu_s"])


def timed(fn: Callable, *args) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - started, result


def timed_into(into: dict[str, float], name: str, fn: Callable, *args) -> object:
    """Call fn(*args); its wall seconds go to into[name], its CPU seconds (this process, every
    thread) to into[name + "_cpu"]."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args)
    into[name] = time.perf_counter() - wall
    into[name + "_cpu"] = time.process_time() - cpu
    return result


# ---- phase timers (the breakdown runs only) ---------------------------------------------------


class PhaseTimers:
    """Inclusive wall time and call count of a few functions, patched for one run."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def add(self, name: str, seconds: float) -> None:
        self.totals[name] = self.totals.get(name, 0.0) + seconds
        self.calls[name] = self.calls.get(name, 0) + 1

    def wrap(self, name: str, fn: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - started)

        return wrapper

    def ms(self, name: str) -> float:
        return 1000 * self.totals.get(name, 0.0)

    def cell(self, name: str) -> str:
        return f"{self.ms(name):,.1f} ({self.calls.get(name, 0)})"


@contextlib.contextmanager
def phase_timers() -> Iterator[PhaseTimers]:
    """Patch the functions a job spends its time in (restored afterwards)."""
    timers = PhaseTimers()
    originals = []

    def patch(owner, attribute: str, name: str, *, classmethod_: bool = False) -> None:
        original = owner.__dict__[attribute]
        originals.append((owner, attribute, original))
        fn = original.__func__ if classmethod_ else original
        wrapped = timers.wrap(name, fn)
        setattr(owner, attribute, classmethod(wrapped) if classmethod_ else wrapped)

    patch(log_reader, "read_state", "log replay")
    patch(partition_log, "snapshot_from_state", "file index (snapshot_from_state)")
    patch(DeltaPartitionLog, "open", "DeltaPartitionLog.open", classmethod_=True)
    patch(DeltaPartitionLog, "reload", "reload after commit")
    patch(DeltaPartitionLog, "commit_maintenance", "commit_maintenance")
    patch(DeltaPartitionLog, "read_files", "read_files")
    patch(partition_log, "write_data_file", "write Parquet")
    patch(TopicCatalog, "__init__", "catalog open")
    patch(TopicCatalog, "topics", "catalog read")
    patch(plans, "plan_retention", "plan")
    patch(plans, "plan_compact_keys", "plan")
    patch(execute, "keep_mask", "keep_mask")
    try:
        yield timers
    finally:
        for owner, attribute, original in reversed(originals):
            setattr(owner, attribute, original)


def profile_job(request: JobRequest) -> str:
    """cProfile of one job run: the top functions by own time and by cumulative time."""
    profiler = cProfile.Profile()
    profiler.enable()
    run_job(request, out=lambda line: None)
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).strip_dirs()
    stats.sort_stats("tottime").print_stats(PROFILE_LINES)
    stats.sort_stats("cumulative").print_stats(PROFILE_LINES)
    return text.getvalue()


# ---- building topics --------------------------------------------------------------------------


@dataclass
class Built:
    root: Path
    segments: int  # closed + the active one
    records: int
    build_seconds: float
    delta_log_entries: int
    table_version: int
    reference_ms: int = 0  # retention: segment i's timestamp is reference - (H - i) * step
    closed_keys: int = 0  # compaction: distinct keys in the closed segments


def delta_log_entries(root: Path) -> int:
    return len(os.listdir(paths.partition_table_uri(str(root), TOPIC, 0) + "/_delta_log"))


def checkpoint_version(root: Path) -> int | None:
    log_dir = paths.partition_table_uri(str(root), TOPIC, 0) + "/_delta_log"
    version = log_commit.last_checkpoint_version(LocalStore(log_dir))
    return None if version < 0 else version


def _append_all(
    log_: DeltaPartitionLog,
    batches: Iterator[list[NewRecord]],
    config: TopicConfig,
    label: str,
    housekeeping: bool,
) -> int:
    appended = 0
    for count, batch in enumerate(batches, start=1):
        log_.append(batch, config=config)
        appended += len(batch)
        if housekeeping and log_.snapshot.table_version % HOUSEKEEPING_EVERY_COMMITS == 0:
            log_.housekeeping()
        if count % 500 == 0:
            log(f"  {label}: {count:,} commits")
    return appended


def build_retention(
    root: Path, history: int, records_per_segment: int, rng, *, housekeeping: bool = True
) -> Built:
    """H segments of `records_per_segment` records; segment i's records are stamped
    reference - (H - i) h (the newest, the active segment, 1 h old)."""
    started = time.perf_counter()
    config = TopicConfig(segment_bytes=SEGMENT_BYTES_MIN, retention_ms=-1)
    TopicCatalog(str(root)).create_topic(TOPIC, 1, config)
    log_ = DeltaPartitionLog.open(paths.partition_table_uri(str(root), TOPIC, 0))
    reference_ms = int(time.time() * 1000)

    def batches() -> Iterator[list[NewRecord]]:
        for i in range(history):
            stamp = reference_ms - (history - i) * SEGMENT_STEP_MS
            yield [
                NewRecord(f"k{j}".encode(), rng.randbytes(100), timestamp_ms=stamp)
                for j in range(records_per_segment)
            ]

    records = _append_all(log_, batches(), config, f"H={history}", housekeeping)
    if housekeeping:
        # Housekeeping leaves up to 99 commits after its last checkpoint, a different number
        # for each H; a checkpoint at the last version makes every H load the same way.
        DeltaTable(log_.table_uri).create_checkpoint()
    segment_count = len(plans.segments(log_.snapshot))
    if segment_count != history:
        raise AssertionError(f"built {segment_count} segments, wanted {history}")
    return Built(
        root,
        history,
        records,
        time.perf_counter() - started,
        delta_log_entries(root),
        log_.snapshot.table_version,
        reference_ms=reference_ms,
    )


def build_compacted(
    root: Path, records: int, keys: int, segment_records: int, value_bytes: int, rng
) -> Built:
    """`records` records in closed segments of `segment_records` (one append, one file each),
    keys uniform over `keys` distinct keys, then one record in the active segment."""
    started = time.perf_counter()
    config = TopicConfig(
        segment_bytes=SEGMENT_BYTES_MIN, cleanup_policy="compact", min_compaction_lag_ms=0
    )
    TopicCatalog(str(root)).create_topic(TOPIC, 1, config)
    log_ = DeltaPartitionLog.open(paths.partition_table_uri(str(root), TOPIC, 0))
    seen: set[int] = set()

    def batches() -> Iterator[list[NewRecord]]:
        for start in range(0, records, segment_records):
            count = min(segment_records, records - start)
            drawn = [rng.randrange(keys) for _ in range(count)]
            seen.update(drawn)
            values = rng.randbytes(value_bytes * count)
            yield [
                NewRecord(f"key-{k:09d}".encode(), values[i * value_bytes : (i + 1) * value_bytes])
                for i, k in enumerate(drawn)
            ]
            log(f"  K={keys:,}: {start + count:,} / {records:,} records")

    appended = _append_all(log_, batches(), config, f"K={keys}", True)
    log_.append([NewRecord(b"active", b"x")], config=config)  # the active segment
    closed = len(plans.segments(log_.snapshot)) - 1
    if appended != records or closed != -(-records // segment_records):
        raise AssertionError(f"built {appended} records in {closed} closed segments")
    return Built(
        root,
        closed + 1,
        records,
        time.perf_counter() - started,
        delta_log_entries(root),
        log_.snapshot.table_version,
        closed_keys=len(seen),
    )


def fresh_copy(built: Built, destination: Path) -> str:
    """A copy of the built root (catalog and partition); the partition table's URI. Files are
    hard links: a job only ever adds files (new data files; commits by put-if-absent, delta-rs
    by temporary file + rename), so the built root stays as it was."""
    shutil.rmtree(destination, ignore_errors=True)
    shutil.copytree(built.root, destination, copy_function=os.link)
    return paths.partition_table_uri(str(destination), TOPIC, 0)


# ---- results ----------------------------------------------------------------------------------


@dataclass
class Run:
    """One timed run of one point."""

    job_s: float
    job_cpu_s: float
    other_cpu_s: float  # every other process on the machine during the job
    baseline_s: dict[str, float]  # what the baseline of the same round took
    summary: dict


@dataclass
class Point:
    job: str  # "retention" or "compact-keys"
    series: str  # "history", "deletable" or "keys"
    history: int  # segments in the partition (closed + active)
    deletable: int = 0  # retention: expired closed segments
    records: int = 0
    keys: int = 0
    build: dict = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    breakdown: dict = field(default_factory=dict)  # name -> [ms, calls]
    breakdown_job_ms: float = 0.0

    def med(self, fn: Callable[[Run], float]) -> float:
        return median([fn(r) for r in self.runs])

    @property
    def job_s(self) -> float:
        return self.med(lambda r: r.job_s)

    def baseline(self, name: str) -> float:
        return self.med(lambda r: r.baseline_s[name])

    def each(self, fn: Callable[[Run], float], fmt: str) -> str:
        return " / ".join(format(fn(r), fmt) for r in self.runs)

    def other_cpu(self) -> float:
        return self.med(lambda r: r.other_cpu_s / r.job_s if r.job_s else 0.0)


# ---- retention ----------------------------------------------------------------------------------


def retention_config(history: int, deletable: int) -> TopicConfig:
    """retention.ms between the D-th and the (D+1)-th oldest segment's age (half a step of
    margin each side, so the minutes between build and job do not matter)."""
    retention_ms = (history - deletable) * SEGMENT_STEP_MS + SEGMENT_STEP_MS // 2
    return TopicConfig(segment_bytes=SEGMENT_BYTES_MIN, retention_ms=retention_ms)


def prepare_retention(built: Built, deletable: int) -> str:
    """Set retention.ms on the built topic so that D segments are expired; the table's URI."""
    TopicCatalog(str(built.root)).alter_topic(
        TOPIC, config=retention_config(built.segments, deletable)
    )
    age_ms = int(time.time() * 1000) - built.reference_ms
    if age_ms >= SEGMENT_STEP_MS // 2:
        raise RuntimeError("the retention topic was built too long ago; rerun the bench")
    return paths.partition_table_uri(str(built.root), TOPIC, 0)


def log_files(uri: str) -> set[str]:
    return set(os.listdir(os.path.join(uri, "_delta_log")))


@contextlib.contextmanager
def rolled_back(uri: str, version: int) -> Iterator[None]:
    """Undo a retention job on a local table: its only change is one new commit file (a
    metadata-only delete: no data file is written or deleted), so removing that file restores
    the table exactly; checked before and after. Cheaper than copying 4 000 segment directories
    per run, which took 2-8 s on this machine."""
    before = log_files(uri)
    try:
        yield
    finally:
        added, lost = log_files(uri) - before, before - log_files(uri)
        expected = {f"{version + 1:020d}.json"}
        if added != expected or lost:
            raise AssertionError(f"the job changed {uri}/_delta_log: +{added} -{lost}")
        os.remove(os.path.join(uri, "_delta_log", expected.pop()))
        if load_table(uri).version() != version:
            raise AssertionError(f"{uri} is not back at version {version}")


def check_retention(
    summary: Summary, uri: str, built: Built, deletable: int, records_per_segment: int
) -> None:
    if summary.failed or summary.segments != deletable:
        raise AssertionError(f"retention deleted {summary.segments} segments, wanted {deletable}")
    if summary.records_removed != deletable * records_per_segment:
        raise AssertionError(f"retention removed {summary.records_removed} records")
    snapshot = DeltaPartitionLog.open(uri).snapshot
    left = len(plans.segments(snapshot))
    if left != built.segments - deletable:
        raise AssertionError(f"{left} segments left, wanted {built.segments - deletable}")
    if snapshot.log_start_offset != deletable * records_per_segment:
        raise AssertionError(f"log start offset {snapshot.log_start_offset}")


def run_retention_point(point: Point, built: Built, repeats: int, records_per_segment: int) -> None:
    request = JobRequest(
        job="retention", root=str(built.root), topics=(TOPIC,), engine=ENGINE_LOCAL
    )
    uri = prepare_retention(built, point.deletable)
    with rolled_back(uri, built.table_version):  # warm-up (imports, caches), untimed
        run_job(request, out=lambda _: None)
    for repeat in range(repeats):
        baseline: dict[str, float] = {}
        timed_into(baseline, "deltatable", DeltaTable, uri)
        timed_into(baseline, "open", DeltaPartitionLog.open, uri)
        lines: list[str] = []
        window: dict[str, float] = {}
        with rolled_back(uri, built.table_version):
            with measured(window):
                summary = run_job(request, out=lines.append)
            check_retention(summary, uri, built, point.deletable, records_per_segment)
        point.runs.append(
            Run(
                window["seconds"], window["cpu_s"], window["other_cpu_s"], baseline, asdict(summary)
            )
        )
        log(
            f"  run {repeat + 1}/{repeats}: job {1000 * window['seconds']:,.0f} ms, "
            f"DeltaTable {1000 * baseline['deltatable']:,.0f} ms, "
            f"open {1000 * baseline['open']:,.0f} ms; deleted {summary.segments} segments, "
            f"checked, rolled back (ok)"
        )
    with rolled_back(uri, built.table_version), phase_timers() as timers:
        point.breakdown_job_ms = 1000 * timed(lambda: run_job(request, out=lambda _: None))[0]
    point.breakdown = {k: [timers.ms(k), timers.calls[k]] for k in timers.totals}


def bench_retention(args, tmp: Path, rng: random.Random) -> tuple[list[Point], str]:
    histories = sorted(int(h) for h in args.history.split(","))
    deletable_series = sorted(int(d) for d in args.deletable_series.split(","))
    largest = histories[-1]
    if args.deletable >= histories[0] or deletable_series[-1] >= largest:
        raise SystemExit("every D must be below its history H (the active segment stays)")
    builds: dict[int, Built] = {}
    for history in histories:
        log(f"retention: building a partition of {history:,} segments ...")
        built = build_retention(
            tmp / f"retention-{history}",
            history,
            args.segment_rows,
            rng,
            housekeeping=not args.no_housekeeping,
        )
        builds[history] = built
        log(
            f"  built in {built.build_seconds:.1f}s: version {built.table_version}, "
            f"{built.delta_log_entries} _delta_log entries"
        )
    points = [Point("retention", "history", h, args.deletable) for h in histories]
    points += [Point("retention", "deletable", largest, d) for d in deletable_series]
    for point in points:
        built = builds[point.history]
        point.records = built.records
        point.build = {
            "seconds": round(built.build_seconds, 2),
            "table_version": built.table_version,
            "delta_log_entries": built.delta_log_entries,
            "checkpoint": checkpoint_version(built.root),
        }
        log(f"retention: H={point.history:,} segments, D={point.deletable:,} to delete ...")
        run_retention_point(point, built, args.repeats, args.segment_rows)
    profile = ""
    if args.profile:
        built = builds[largest]
        deletable = max(deletable_series)
        log(f"retention: cProfile of H={largest:,}, D={deletable:,} ...")
        uri = prepare_retention(built, deletable)
        request = JobRequest(job="retention", root=str(built.root), topics=(TOPIC,))
        with rolled_back(uri, built.table_version):
            profile = profile_job(request)
    return points, profile


# ---- key compaction -----------------------------------------------------------------------------


def closed_files(uri: str) -> list:
    snapshot = DeltaPartitionLog.open(uri).snapshot
    return [f for segment in plans.segments(snapshot)[:-1] for f in segment.files]


def run_compaction_point(point: Point, built: Built, work: Path, repeats: int) -> None:
    request = JobRequest(job="compact-keys", root=str(work), topics=(TOPIC,), engine=ENGINE_LOCAL)
    fresh_copy(built, work)
    run_job(request, out=lambda _: None)  # warm-up (imports, allocator, caches), untimed
    for repeat in range(repeats):
        uri = fresh_copy(built, work)
        files = closed_files(uri)
        partition_log = DeltaPartitionLog.open(uri)
        baseline: dict[str, float] = {}
        table = timed_into(baseline, "read_files", partition_log.read_files, files)
        if table.num_rows != built.records:
            raise AssertionError(f"read {table.num_rows} records, wanted {built.records}")
        del table
        timed_into(baseline, "open", DeltaPartitionLog.open, uri)
        window: dict[str, float] = {}
        with measured(window):
            summary = run_job(request, out=lambda _: None)
        if summary.failed or summary.records_kept != built.closed_keys:
            raise AssertionError(
                f"compaction kept {summary.records_kept} records, wanted {built.closed_keys}"
            )
        if summary.records_kept + summary.records_removed != built.records:
            raise AssertionError(f"kept + removed != {built.records}")
        reopened = DeltaPartitionLog.open(uri).snapshot
        stored = sum(f.num_records for f in reopened.files)
        if stored != built.closed_keys + 1:  # + the active segment's record
            raise AssertionError(f"{stored} records stored after compaction")
        point.runs.append(
            Run(
                window["seconds"], window["cpu_s"], window["other_cpu_s"], baseline, asdict(summary)
            )
        )
        log(
            f"  run {repeat + 1}/{repeats}: job {window['seconds']:.2f}s "
            f"({built.records / window['seconds']:,.0f} records/s), "
            f"read_files {baseline['read_files']:.2f}s; "
            f"kept {summary.records_kept:,}, removed {summary.records_removed:,} (ok)"
        )
    fresh_copy(built, work)
    with phase_timers() as timers:
        point.breakdown_job_ms = 1000 * timed(lambda: run_job(request, out=lambda _: None))[0]
    point.breakdown = {k: [timers.ms(k), timers.calls[k]] for k in timers.totals}


def bench_compaction(args, tmp: Path, rng: random.Random) -> tuple[list[Point], str]:
    points = []
    builds = {}
    for keys in sorted(int(k) for k in args.keys.split(",")):
        log(f"compact-keys: building {args.records:,} records over {keys:,} keys ...")
        built = build_compacted(
            tmp / f"compact-{keys}",
            args.records,
            keys,
            args.segment_records,
            args.value_bytes,
            rng,
        )
        builds[keys] = built
        log(
            f"  built in {built.build_seconds:.1f}s: {built.segments - 1} closed segments, "
            f"{built.closed_keys:,} distinct keys"
        )
        point = Point(
            "compact-keys",
            "keys",
            built.segments,
            records=args.records,
            keys=keys,
            build={
                "seconds": round(built.build_seconds, 2),
                "table_version": built.table_version,
                "delta_log_entries": built.delta_log_entries,
                "distinct_keys": built.closed_keys,
            },
        )
        log(f"compact-keys: {args.records:,} records, {keys:,} keys ...")
        run_compaction_point(point, built, tmp / "work", args.repeats)
        points.append(point)
        shutil.rmtree(tmp / "work", ignore_errors=True)
        if not args.profile:
            shutil.rmtree(built.root, ignore_errors=True)
    profile = ""
    if args.profile:
        keys = max(builds)
        log(f"compact-keys: cProfile of K={keys:,} ...")
        fresh_copy(builds[keys], tmp / "work")
        profile = profile_job(
            JobRequest(job="compact-keys", root=str(tmp / "work"), topics=(TOPIC,))
        )
    return points, profile


# ---- report -------------------------------------------------------------------------------------


def retention_table(points: list[Point]) -> str:
    header = (
        "| series | H segments | D deleted | job ms | job CPU ms | DeltaTable load ms | open ms "
        "| open CPU ms | job / open | job / open, CPU | job / DeltaTable "
        "| open - DeltaTable ms (file index) | `_delta_log` entries | checkpoint | other CPU "
        "| job ms of each run |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for p in points:
        base = p.baseline
        job_over_open = p.med(lambda r: r.job_s / r.baseline_s["open"])
        cpu_over_open = p.med(lambda r: r.job_cpu_s / r.baseline_s["open_cpu"])
        job_over_dt = p.med(lambda r: r.job_s / r.baseline_s["deltatable"])
        index_ms = p.med(lambda r: 1000 * (r.baseline_s["open"] - r.baseline_s["deltatable"]))
        lines.append(
            f"| {p.series} | {p.history:,} | {p.deletable:,} | {1000 * p.job_s:,.1f} "
            f"| {1000 * p.med(lambda r: r.job_cpu_s):,.1f} | {1000 * base('deltatable'):,.1f} "
            f"| {1000 * base('open'):,.1f} | {1000 * base('open_cpu'):,.1f} "
            f"| {job_over_open:.2f}x | {cpu_over_open:.2f}x | {job_over_dt:.2f}x "
            f"| {index_ms:,.1f} | {p.build['delta_log_entries']:,} "
            f"| {'none' if p.build['checkpoint'] is None else p.build['checkpoint']} "
            f"| {100 * p.other_cpu():.0f}% | {p.each(lambda r: 1000 * r.job_s, ',.0f')} |"
        )
    return "\n".join(lines)


def compaction_table(points: list[Point]) -> str:
    header = (
        "| records | keys | closed segments | records kept | job s | job CPU s "
        "| records/s (read) | read_files s | read_files CPU s | read_files records/s "
        "| job / read | job / read, CPU | open ms | other CPU | job s of each run |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for p in points:
        kept = p.runs[0].summary["records_kept"]
        read_s = p.baseline("read_files")
        job_over_read = p.med(lambda r: r.job_s / r.baseline_s["read_files"])
        cpu_over_read = p.med(lambda r: r.job_cpu_s / r.baseline_s["read_files_cpu"])
        lines.append(
            f"| {p.records:,} | {p.keys:,} | {p.history - 1} | {kept:,} | {p.job_s:.2f} "
            f"| {p.med(lambda r: r.job_cpu_s):.2f} | {p.records / p.job_s:,.0f} | {read_s:.2f} "
            f"| {p.baseline('read_files_cpu'):.2f} | {p.records / read_s:,.0f} "
            f"| {job_over_read:.2f}x | {cpu_over_read:.2f}x | {1000 * p.baseline('open'):,.1f} "
            f"| {100 * p.other_cpu():.0f}% | {p.each(lambda r: r.job_s, '.2f')} |"
        )
    return "\n".join(lines)


def breakdown_table(points: list[Point], names: list[str]) -> str:
    header = "| point | job ms | " + " | ".join(names) + " |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for p in points:
        label = (
            f"H={p.history:,} D={p.deletable:,}"
            if p.job == "retention"
            else f"N={p.records:,} K={p.keys:,}"
        )
        cells = []
        for name in names:
            ms, calls = p.breakdown.get(name, [0.0, 0])
            cells.append(f"{ms:,.1f} ({calls})")
        lines.append(f"| {label} | {p.breakdown_job_ms:,.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


RETENTION_PHASES = [
    "catalog open",
    "catalog read",
    "DeltaPartitionLog.open",
    "log replay",
    "file index (snapshot_from_state)",
    "plan",
    "commit_maintenance",
    "reload after commit",
]
COMPACTION_PHASES = [
    "DeltaPartitionLog.open",
    "log replay",
    "file index (snapshot_from_state)",
    "plan",
    "read_files",
    "keep_mask",
    "commit_maintenance",
    "write Parquet",
    "reload after commit",
]


# ---- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--history",
        default=DEFAULT_HISTORY,
        help="retention: segments per partition, comma-separated (default %(default)s)",
    )
    parser.add_argument(
        "--deletable",
        type=int,
        default=DEFAULT_DELETABLE,
        help="retention: expired segments in the history series (default %(default)s)",
    )
    parser.add_argument(
        "--deletable-series",
        default=DEFAULT_DELETABLE_SERIES,
        help="retention: expired segments, on the largest history (default %(default)s)",
    )
    parser.add_argument(
        "--segment-rows",
        type=int,
        default=DEFAULT_RETENTION_SEGMENT_RECORDS,
        help="retention: records per segment (default %(default)s)",
    )
    parser.add_argument(
        "--no-housekeeping",
        action="store_true",
        help="retention: build without housekeeping, so no checkpoint: every open replays "
        "all H commit files",
    )
    parser.add_argument(
        "--records",
        type=int,
        default=DEFAULT_RECORDS,
        help="compaction: records in closed segments (default %(default)s)",
    )
    parser.add_argument(
        "--keys",
        default=DEFAULT_KEYS,
        help="compaction: distinct keys, comma-separated (default %(default)s)",
    )
    parser.add_argument(
        "--segment-records",
        type=int,
        default=DEFAULT_SEGMENT_RECORDS,
        help="compaction: records per closed segment (default %(default)s)",
    )
    parser.add_argument(
        "--value-bytes",
        type=int,
        default=DEFAULT_VALUE_BYTES,
        help="compaction: value size (default %(default)s)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help="timed runs per point; medians are reported (default %(default)s)",
    )
    parser.add_argument(
        "--only", choices=("retention", "compact-keys"), help="run one of the two benches"
    )
    parser.add_argument(
        "--profile", action="store_true", help="cProfile the largest point of each bench"
    )
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--tmp-dir", type=Path, help="parent of the temp dir (default: $TMPDIR)")
    parser.add_argument("--seed", type=int, default=1, help="seed of keys and values")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    machine = machine_info(Path(args.tmp_dir or tempfile.gettempdir()))
    load_before = [round(x, 2) for x in os.getloadavg()]
    log(f"command: {command}")
    log(f"machine: {json.dumps(machine)}")
    log(f"load average before: {load_before}")
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="lakelog-bench-jobs-", dir=args.tmp_dir))
    started = time.perf_counter()
    retention: list[Point] = []
    compaction: list[Point] = []
    profiles: dict[str, str] = {}
    loads: dict[str, list[float]] = {}
    try:
        if args.only in (None, "retention"):
            retention, profiles["retention"] = bench_retention(args, tmp, rng)
            loads["after retention"] = [round(x, 2) for x in os.getloadavg()]
        if args.only in (None, "compact-keys"):
            compaction, profiles["compact-keys"] = bench_compaction(args, tmp, rng)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    total_s = time.perf_counter() - started
    load_after = [round(x, 2) for x in os.getloadavg()]

    header = report_header(
        machine,
        command=command,
        code_details="jobs run with the local engine",
        load_before=load_before,
        load_after=load_after,
    )
    print("\n".join(header[:3]))  # the load line follows with the per-phase loads
    print(
        f"total {total_s:.0f}s; {args.repeats} runs per point, medians shown; load average "
        f"(1, 5, 15 min) before {load_before}, "
        + "".join(f"{name} {value}, " for name, value in loads.items())
        + f"after {load_after}"
    )
    if retention:
        print()
        print(
            f"Retention ({args.segment_rows} records per segment, one file per segment, built "
            f"{'without' if args.no_housekeeping else 'with'} housekeeping; "
            f"'other CPU': every other process during the job, % of one core):"
        )
        print()
        print(retention_table(retention))
        print()
        print("Retention phases (one extra run per point; inclusive ms (calls)):")
        print()
        print(breakdown_table(retention, RETENTION_PHASES))
    if compaction:
        print()
        print(
            f"Key compaction ({args.value_bytes}-byte values, {args.segment_records:,} records "
            f"per closed segment, one file each; records/s = records read / job time):"
        )
        print()
        print(compaction_table(compaction))
        print()
        print("Compaction phases (one extra run per point; inclusive ms (calls)):")
        print()
        print(breakdown_table(compaction, COMPACTION_PHASES))
    for name, text in profiles.items():
        if text:
            print()
            print(f"cProfile of {name}:")
            print(text)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "command": command,
                    "machine": machine,
                    "total_seconds": round(total_s, 1),
                    "load_average_before": load_before,
                    "load_average_during": loads,
                    "load_average_after": load_after,
                    "retention": [asdict(p) for p in retention],
                    "compaction": [asdict(p) for p in compaction],
                },
                indent=2,
            )
        )
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
