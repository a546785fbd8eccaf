"""Commit latency as a partition ages: p50/p99 of one-record appends at table versions around
10, 1 000 and 10 000, with the writer's housekeeping (small-file compaction, checkpoint, log
trim) every 32 commits as the gateway runs it. Goal: the last within 1.5x of the first.

Usage: .venv/bin/python bench/commit_latency.py [--versions 10,1000,10000] [--sample 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storage_layout.log import DeltaPartitionLog  # noqa: E402
from storage_layout.records import NewRecord  # noqa: E402
from storage_layout.topic_config import TopicConfig  # noqa: E402

RECORD = [NewRecord(None, b"x" * 100)]


HOUSEKEEPING_EVERY_COMMITS = 32  # as the gateway's writer (api/core/writer.py)


def append(log: DeltaPartitionLog, config: TopicConfig) -> float:
    """One timed append; housekeeping every HOUSEKEEPING_EVERY_COMMITS commits, untimed, as the
    gateway runs it in the background."""
    start = time.perf_counter()
    log.append(RECORD, config=config)
    elapsed_ms = (time.perf_counter() - start) * 1000
    if log.snapshot.table_version % HOUSEKEEPING_EVERY_COMMITS == 0:
        log.housekeeping()
    return elapsed_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--versions", default="10,1000,10000")
    parser.add_argument("--sample", type=int, default=200, help="commits timed per point")
    args = parser.parse_args()
    targets = [int(v) for v in args.versions.split(",")]
    config = TopicConfig()
    with tempfile.TemporaryDirectory() as directory:
        uri = str(Path(directory) / "t" / "0")
        DeltaPartitionLog.create(uri)
        log = DeltaPartitionLog.open(uri)
        print("| table version | p50 ms | p99 ms | files | _delta_log entries |")
        print("|---|---|---|---|---|")
        results = []
        for target in targets:
            while log.snapshot.table_version < target:
                append(log, config)
                if log.snapshot.table_version % 500 == 0:
                    print(f"[progress] version {log.snapshot.table_version}", file=sys.stderr)
            samples = sorted(append(log, config) for _ in range(args.sample))
            p50 = statistics.median(samples)
            p99 = samples[int(len(samples) * 0.99) - 1]
            entries = len(list((Path(uri) / "_delta_log").iterdir()))
            results.append(p50)
            print(f"| {target} | {p50:.1f} | {p99:.1f} | {len(log.snapshot.files)} | {entries} |")
        print(f"ratio p50 last/first: {results[-1] / results[0]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
