"""The storage path's CPU per commit, without a node: DeltaPartitionLog stage + commit of N
records in one thread, with housekeeping (merges, checkpoints, log trim) run as the gateway's
writer runs it (after 32 commits, and when a second passed or half the in-memory tail was
committed since the last pass; a second is taken as HOUSEKEEPING_COMMITS commits here, the
rate of rounds of 100 in bench/commit_cost.py). Process CPU time per commit, every
`--report-every` commits (so a cost that grows with uptime shows), and the checkpoints' own
cost, its rows (mostly tombstones) and the data files on disk.

With `--simulated-commit-interval-ms X` the process's wall clock (time.time) is simulated: it
advances X ms per commit, so an hour of a partition's life (tombstones expiring, merged files
settling after the 10-minute minimum history) runs in minutes.

Run it for two revisions side by side to compare them (this VM drifts ±30% from hour to hour):

    .venv/bin/python bench/storage_commit_cost.py --records 100 --commits 3000 --dir /dev/shm
    REPO=/path/to/other/checkout .venv/bin/python bench/storage_commit_cost.py ...

Usage: .venv/bin/python bench/storage_commit_cost.py [--records N] [--commits C]
           [--report-every K] [--dir PARENT] [--profile] [--simulated-commit-interval-ms X]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(os.environ.get("REPO", Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402

from storage_layout.log import DeltaPartitionLog  # noqa: E402
from storage_layout.log import housekeeping as housekeeping_module  # noqa: E402
from storage_layout.records import RecordColumns  # noqa: E402
from storage_layout.schema import NEW_RECORDS_SCHEMA  # noqa: E402
from storage_layout.topic_config import TopicConfig  # noqa: E402

WARMUP_COMMITS = 50
HOUSEKEEPING_EVERY_COMMITS = 32  # api/core/writer.py
HOUSEKEEPING_COMMITS = 278  # "a second" of commits (rounds of 100 ran ~278 commits/s)
VALUE_BYTES = 100
KEY_BYTES = 8


def records(count: int) -> RecordColumns:
    """`count` records as a Kafka batch decodes them (columns, no headers)."""
    columns = [
        pa.array([1_700_000_000_000 + i for i in range(count)], pa.int64()),
        pa.array([os.urandom(KEY_BYTES) for _ in range(count)], pa.binary()),
        pa.array([os.urandom(VALUE_BYTES) for _ in range(count)], pa.binary()),
        pa.nulls(count, NEW_RECORDS_SCHEMA.field("headers").type),
    ]
    table = pa.Table.from_arrays(columns, schema=NEW_RECORDS_SCHEMA)
    return RecordColumns(table, count * (KEY_BYTES + VALUE_BYTES))


class CheckpointClock:
    """Wraps the housekeeper's write_checkpoint to time each checkpoint (process CPU)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.rows = 0  # of the last one
        self._write = housekeeping_module.write_checkpoint
        housekeeping_module.write_checkpoint = self._timed

    def _timed(self, log, state, *args, **kwargs):
        started = time.process_time()
        try:
            written = self._write(log, state, *args, **kwargs)
            self.rows = written.rows if hasattr(written, "rows") else 0
            return written
        finally:
            self.seconds.append(time.process_time() - started)


class SimulatedClock:
    """time.time, advanced by `interval_ms` at every `tick` (one per commit)."""

    def __init__(self, interval_ms: float) -> None:
        self._now_s = time.time()
        self._interval_s = interval_ms / 1000
        time.time = lambda: self._now_s

    def tick(self) -> None:
        self._now_s += self._interval_s


def data_files_on_disk(uri: str) -> int:
    return sum(
        name.endswith(".parquet")
        for directory, _, names in os.walk(uri)
        if "_delta_log" not in directory
        for name in names
    )


def housekeeping_due(log: DeltaPartitionLog, since: int) -> bool:
    overdue = getattr(log, "housekeeping_overdue", None)  # older revisions lack the rule
    early = overdue is not None and overdue()
    return since >= HOUSEKEEPING_EVERY_COMMITS and (since >= HOUSEKEEPING_COMMITS or early)


def run(args: argparse.Namespace, root: str) -> None:
    uri = os.path.join(root, "t", "0")
    DeltaPartitionLog.create(uri)
    log = DeltaPartitionLog.open(uri)
    config, batch = TopicConfig(), records(args.records)
    for _ in range(WARMUP_COMMITS):
        log.append(batch, config=config)
    clock = CheckpointClock()
    simulated = args.simulated_commit_interval_ms
    wall = SimulatedClock(simulated) if simulated else None
    profile = cProfile.Profile() if args.profile else None
    if profile:
        profile.enable()
    started, since = time.process_time(), 0
    for index in range(1, args.commits + 1):
        log.commit_staged(log.stage_append(batch, config=config))
        if wall:
            wall.tick()
        since += 1
        if housekeeping_due(log, since):
            since = 0
            log.housekeeping()
            log.commit_pending_merge()
        if index % args.report_every == 0 or index == args.commits:
            on_disk = data_files_on_disk(uri)
            report(index, time.process_time() - started, clock, len(log.snapshot.files), on_disk)
    if profile:
        profile.disable()
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


def report(commits: int, cpu_s: float, clock: CheckpointClock, files: int, on_disk: int) -> None:
    recent = clock.seconds[-5:]
    checkpoint_ms = sum(recent) / len(recent) * 1000 if recent else 0.0
    print(
        f"{commits:>7} commits: {cpu_s / commits * 1000:.3f} ms CPU/commit on average, "
        f"last checkpoints {checkpoint_ms:.0f} ms each ({clock.rows} rows), {files} live "
        f"files, {on_disk} data files on disk"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100, help="records per commit")
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--report-every", type=int, default=5000)
    parser.add_argument("--dir", default=None, help="parent of the table (tmpfs: /dev/shm)")
    parser.add_argument("--profile", action="store_true", help="cProfile the timed commits")
    parser.add_argument(
        "--simulated-commit-interval-ms",
        type=float,
        default=0.0,
        help="simulate the wall clock: X ms per commit (0: the real clock)",
    )
    args = parser.parse_args()
    print(f"code: {REPO}; {args.records} records/commit, {args.commits} commits")
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        run(args, root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
