"""Spark batch reads and writes of a topic: format("lakelog") vs format("delta"), in one run.

Cases (local Spark session, `--master` default local[2], 8-byte keys and 100-byte random
values):

  (1) read   a topic of P partitions (default 4) holding N records (default 2 000 000), loaded
             before any clock starts with direct `DeltaPartitionLog.append`s of B records
             (default 10 000, a Spark write's chunk), each followed by the small-file
             compaction housekeeping runs (`maybe_merge_small_files`), so the file layout is what a
             live partition has: one merged file of the first 32 x B records, then B-record
             files (19 files per partition at the defaults).
               lakelog  spark.read.format("lakelog").option("subscribe", topic)
                        .option("startingOffsets", "earliest").load(root)
               delta    the union of spark.read.format("delta").load(<partition table>) over
                        the P tables, selecting the same seven columns with the same types
                        (key, value, topic and partition as literals, offset, timestamp,
                        timestamp_type cast to int as timestampType)
             Both are materialized with `df.write.format("noop").mode("overwrite").save()`:
             every row of every column reaches Spark's row format (the noop sink pulls each
             row through the plan) and nothing is written anywhere, so the time is the read.
             An aggregate over length(key) + length(value) would let Delta's Parquet scan
             prune the other columns while the Python source (no column pruning) reads and
             ships all of them: it would compare different work (`--materialize aggregate`
             runs it as a check). The clock covers planning too: the DataFrame
             is built inside the timed region, as a job builds it.
  (2) write  a cached DataFrame of M records (default 500 000; key binary 'k%07d', value 100
             bytes of SHA-2 output, 4 Spark partitions), written with
               lakelog  df.write.format("lakelog").option("topic", t)
                        .option("leaderRouting", "direct").mode("append").save(root)
                        into a fresh P-partition topic (murmur2 of the key places records);
               delta    df.write.format("delta").mode("append").save(<fresh plain table>).
  (3) breakdown of the lakelog read, outside Spark: the driver's planning
             (`LakelogBatchReader.partitions()`), and the executors' pyarrow work
             (`read_split` over every split in this process, one thread); the rest of the
             Spark time is the Python worker -> JVM Arrow transfer and Spark's own work.

Every case runs once as a warm-up (JIT, Delta snapshot caches, Python workers; reported but not
counted), then in R rounds (default 3) with lakelog and delta back to back, their order swapped
every round so drift in the load hits both alike; the table shows the median round and lists
every round; the ratio is lakelog / delta records/s of the medians (per-round ratios listed).
Verified: both reads count N rows; each write stores M records (topic high watermarks, Delta
row count). CPU per case from /proc: this process (the driver's Python), the JVM, Python
workers (the executors' Python and the data source planner) and every other process on the
machine (noise).

Usage: .venv/bin/python bench/spark_read.py [--records N] [--partitions P] [--batch-records B]
           [--write-records M] [--rounds R] [--materialize noop|aggregate] [--skip-write]
           [--quick] [--master local[2]] [--json out.json] [--tmp-dir DIR]
Progress goes to stderr, markdown tables to stdout. About 2 minutes at the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from functools import reduce
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from deltalake import DeltaTable  # noqa: E402

from bench.produce_fetch import machine_info, report_header  # noqa: E402
from conf.settings import Settings  # noqa: E402
from storage_layout.log import DeltaPartitionLog  # noqa: E402
from storage_layout.meta.catalog import TopicCatalog  # noqa: E402
from storage_layout.paths import partition_table_uri  # noqa: E402
from storage_layout.records import NewRecord  # noqa: E402
from storage_layout.topic_config import TopicConfig  # noqa: E402

KEY_BYTES = 8
VALUE_BYTES = 100
RECORD_BYTES = KEY_BYTES + VALUE_BYTES  # payload counted in MB/s (MB = 10**6 bytes)
DEFAULT_RECORDS = 2_000_000
DEFAULT_PARTITIONS = 4
DEFAULT_BATCH_RECORDS = 10_000
DEFAULT_WRITE_RECORDS = 500_000
DEFAULT_ROUNDS = 3
QUICK_RECORDS = 400_000
QUICK_WRITE_RECORDS = 100_000
READ_TOPIC = "bench"
NOISY_OTHER_CPU = 0.25  # warn when other processes used more than this share of a core


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- CPU of this process tree and of the machine ---------------------------------------------

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_stats() -> dict[int, tuple[str, int, float]]:
    """pid -> (comm, ppid, CPU seconds incl. reaped children) of every process."""
    stats = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        cpu = sum(int(v) for v in fields[11:15]) / _CLK_TCK  # utime stime cutime cstime
        stats[int(entry)] = (comm, int(fields[1]), cpu)
    return stats


def system_busy_cpu_s() -> float:
    """Busy (non-idle, non-iowait) CPU time of the whole machine, in seconds."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:9]]
    return (sum(values) - values[3] - values[4]) / _CLK_TCK


def tree_cpu_s(root_pid: int | None = None) -> dict[str, float]:
    """CPU seconds so far of this process ("driver"), the JVM ("jvm"), the other Python and
    remaining processes below it ("workers": Spark's Python workers, a gateway) and the whole
    machine ("busy")."""
    root_pid = root_pid or os.getpid()
    stats = _proc_stats()
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    totals = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
    stack = [root_pid]
    while stack:
        pid = stack.pop()
        stack += children.get(pid, [])
        if pid not in stats:
            continue
        comm, _, cpu = stats[pid]
        if pid == root_pid:
            totals["driver"] += cpu
        elif comm == "java":
            totals["jvm"] += cpu
        else:
            totals["workers"] += cpu
    totals["busy"] = system_busy_cpu_s()
    return totals


class CpuMeter:
    def __init__(self) -> None:
        self._begin = tree_cpu_s()

    def stop(self) -> dict[str, float]:
        end = tree_cpu_s()
        # A Python worker that exits between the samples moves its time to its parent only
        # when reaped: clamp the few negative deltas that leaves.
        used = {key: max(0.0, end[key] - self._begin[key]) for key in end}
        own = used["driver"] + used["jvm"] + used["workers"]
        return {
            "cpu_driver_s": used["driver"],
            "cpu_jvm_s": used["jvm"],
            "cpu_workers_s": used["workers"],
            "cpu_other_s": max(0.0, used["busy"] - own),
        }


# ---- results ---------------------------------------------------------------------------------


@dataclass
class Run:
    case: str  # "read", "write"
    source: str  # "lakelog", "delta"
    round_no: int  # -1: warm-up
    records: int
    seconds: float
    cpu_driver_s: float = 0.0
    cpu_jvm_s: float = 0.0
    cpu_workers_s: float = 0.0
    cpu_other_s: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "records_per_s": round(self.records_per_s, 1)}


def median_run(runs: list[Run]) -> Run:
    """The run with the median time (of an even count, the slower of the middle two)."""
    ordered = sorted(runs, key=lambda r: r.seconds)
    return ordered[len(ordered) // 2]


# ---- data ------------------------------------------------------------------------------------


def load_topic(
    root: str, partitions: int, records: int, batch: int, seed: int, topic: str = READ_TOPIC
) -> dict:
    """Create the topic and fill its partitions with direct appends + small-file compaction."""
    import random

    TopicCatalog(root).create_topic(topic, partitions, TopicConfig())
    rng = random.Random(seed)
    config = TopicConfig()
    per_partition = [records // partitions + (p < records % partitions) for p in range(partitions)]
    files, merged = [], 0
    key_number = 0
    for partition, count in enumerate(per_partition):
        partition_log = DeltaPartitionLog.open(partition_table_uri(root, topic, partition))
        written = 0
        while written < count:
            size = min(batch, count - written)
            blob = rng.randbytes(VALUE_BYTES * size)
            chunk = [
                NewRecord(
                    key=f"k{(key_number + i) % 10**7:07d}".encode(),
                    value=blob[i * VALUE_BYTES : (i + 1) * VALUE_BYTES],
                )
                for i in range(size)
            ]
            partition_log.append(chunk, config=config)
            key_number += size
            written += size
            while (replaced := partition_log.maybe_merge_small_files()) > 0:
                merged += replaced
        partition_log.housekeeping()  # checkpoints once 100 versions accumulated, as live
        snapshot = DeltaPartitionLog.open(partition_log.table_uri).snapshot
        if snapshot.high_watermark != count:
            raise AssertionError(f"partition {partition}: HW {snapshot.high_watermark} != {count}")
        files.append(snapshot.files)
    return {
        "records_per_partition": per_partition,
        "files_per_partition": [len(f) for f in files],
        "bytes": sum(d.size_bytes for f in files for d in f),
        "files_merged_away": merged,
        "largest_file_records": max(d.num_records for f in files for d in f),
    }


# ---- Spark -----------------------------------------------------------------------------------


def start_spark(master: str):
    from pipeline.source import register_data_source
    from pipeline.spark import build_spark_session

    spark = build_spark_session(Settings(spark_master=master, spark_shuffle_partitions=4))
    spark.sparkContext.setLogLevel("ERROR")
    register_data_source(spark)
    return spark


def lakelog_frame(spark, root: str):
    return (
        spark.read.format("lakelog")
        .option("subscribe", READ_TOPIC)
        .option("startingOffsets", "earliest")
        .load(root)
    )


def delta_frame(spark, root: str, partitions: int):
    return delta_union(spark.read, root, READ_TOPIC, partitions)


def delta_union(reader, root: str, topic: str, partitions: int):
    """The partitions' Delta tables read with `reader` (spark.read or spark.readStream) in
    the Kafka source's columns, as one DataFrame: the baseline lakelog's reads are held to."""
    from pyspark.sql import functions as F

    frames = [
        reader.format("delta")
        .load(partition_table_uri(root, topic, p))
        .select(
            "key",
            "value",
            F.lit(topic).alias("topic"),
            F.lit(p).cast("int").alias("partition"),
            "offset",
            "timestamp",
            F.col("timestamp_type").cast("int").alias("timestampType"),
        )
        for p in range(partitions)
    ]
    return reduce(lambda a, b: a.unionAll(b), frames)


def materialize(df, how: str) -> None:
    if how == "noop":
        df.write.format("noop").mode("overwrite").save()
        return
    from pyspark.sql import functions as F

    df.select(F.sum(F.length("key") + F.length("value"))).collect()


def timed_read(spark, source: str, args, root: str, round_no: int) -> Run:
    meter, start = CpuMeter(), time.perf_counter()
    if source == "lakelog":
        df = lakelog_frame(spark, root)
    else:
        df = delta_frame(spark, root, args.partitions)
    materialize(df, args.materialize)
    seconds = time.perf_counter() - start
    return Run("read", source, round_no, args.records, seconds, **meter.stop())


def source_frame(spark, records: int):
    """The write cases' input, cached: key 'k%07d', value 100 bytes of SHA-2 output."""
    from pyspark.sql import functions as F

    text = F.col("id").cast("string")
    value = F.concat(
        F.unhex(F.sha2(text, 512)),  # 64 bytes
        F.unhex(F.sha2(text, 256)),  # 32 bytes
        F.unhex(F.substring(F.sha1(text), 1, 8)),  # 4 bytes
    )
    df = spark.range(records, numPartitions=4).select(
        F.format_string("k%07d", F.col("id") % 10**7).cast("binary").alias("key"),
        value.alias("value"),
    )
    df = df.cache()
    count, width = df.select(F.count("*"), F.min(F.length("value"))).first()
    if count != records or width != VALUE_BYTES:
        raise AssertionError(f"source frame: {count} rows, values of {width} bytes")
    return df


def timed_write(df, source: str, args, root: str, tmp_root: Path, name: str, round_no: int):
    if source == "lakelog":
        TopicCatalog(root).create_topic(name, args.partitions, TopicConfig())
        writer = (
            df.write.format("lakelog")
            .option("topic", name)
            .option("leaderRouting", "direct")
            .mode("append")
        )
        target = root
    else:
        writer = df.write.format("delta").mode("append")
        target = str(tmp_root / "plain" / name)
    meter, start = CpuMeter(), time.perf_counter()
    writer.save(target)
    seconds = time.perf_counter() - start
    run = Run("write", source, round_no, args.write_records, seconds, **meter.stop())
    if source == "lakelog":
        stored = sum(
            DeltaPartitionLog.open(partition_table_uri(root, name, p)).bounds().high_watermark
            for p in range(args.partitions)
        )
        files = [
            len(DeltaPartitionLog.open(partition_table_uri(root, name, p)).snapshot.files)
            for p in range(args.partitions)
        ]
    else:
        dt = DeltaTable(target)
        stored = dt.to_pyarrow_dataset().count_rows()
        files = [len(dt.file_uris())]
    if stored != args.write_records:
        raise AssertionError(f"{source} write {name}: {stored} records stored")
    run.extra["files"] = files
    return run


# ---- breakdown of the lakelog read outside Spark ---------------------------------------------


def lakelog_breakdown(root: str, rounds: int) -> dict:
    """Driver planning and the executors' pyarrow reading, timed in this process."""
    from pipeline.source import LakelogBatchReader
    from pipeline.splits import read_split

    options = {"subscribe": READ_TOPIC, "startingOffsets": "earliest", "path": root}
    plan_s, read_s, rows, batches, splits = [], [], 0, 0, []
    for _ in range(rounds):
        start = time.perf_counter()
        splits = LakelogBatchReader(options).partitions()
        plan_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        rows = batches = 0
        for split in splits:
            for batch in read_split(split, include_headers=False):
                rows += batch.num_rows
                batches += 1
        read_s.append(time.perf_counter() - start)
    return {
        "plan_s": statistics.median(plan_s),
        "pyarrow_read_s": statistics.median(read_s),
        "rows": rows,
        "splits": len(splits),
        "arrow_batches": batches,
        "files": sum(len(s.files) for s in splits),
    }


# ---- report ----------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render(case: str, runs: list[Run]) -> tuple[str, dict]:
    header = (
        "| source | records | median s | records/s | MB/s | lakelog / delta | warm-up s "
        "| s of each round | driver CPU | JVM CPU | Python workers CPU | other CPU |"
    )
    lines = [header, "|" + "|".join(["---"] * (header.count("|") - 1)) + "|"]
    medians = {}
    for source in ("lakelog", "delta"):
        timed = [r for r in runs if r.case == case and r.source == source and r.round_no >= 0]
        if not timed:
            continue
        medians[source] = median_run(timed)
    ratio = None
    if "lakelog" in medians and "delta" in medians:
        ratio = medians["lakelog"].records_per_s / medians["delta"].records_per_s
    per_round = []
    for round_no in sorted({r.round_no for r in runs if r.case == case and r.round_no >= 0}):
        pair = {r.source: r for r in runs if r.case == case and r.round_no == round_no}
        if "lakelog" in pair and "delta" in pair:
            per_round.append(pair["lakelog"].records_per_s / pair["delta"].records_per_s)
    for source, m in medians.items():
        warm = next(
            (r for r in runs if r.case == case and r.source == source and r.round_no < 0), None
        )
        rounds = " / ".join(
            f"{r.seconds:.2f}"
            for r in runs
            if r.case == case and r.source == source and r.round_no >= 0
        )
        shown = f"{ratio:.2f}x" if source == "lakelog" and ratio is not None else "-"

        def cpu(seconds: float, m: Run = m) -> str:
            return f"{100 * seconds / m.seconds:.0f}%"

        lines.append(
            f"| {source} | {m.records:,} | {m.seconds:.2f} | {_fmt(m.records_per_s)} "
            f"| {_fmt(m.records_per_s * RECORD_BYTES / 1e6, 1)} | {shown} "
            f"| {'-' if warm is None else f'{warm.seconds:.2f}'} | {rounds} "
            f"| {cpu(m.cpu_driver_s)} | {cpu(m.cpu_jvm_s)} | {cpu(m.cpu_workers_s)} "
            f"| {cpu(m.cpu_other_s)} |"
        )
    summary = {
        "ratio": None if ratio is None else round(ratio, 3),
        "ratio_per_round": [round(x, 3) for x in per_round],
    }
    return "\n".join(lines), summary


# ---- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, help=f"records read (default {DEFAULT_RECORDS:,})")
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    parser.add_argument(
        "--batch-records",
        type=int,
        default=DEFAULT_BATCH_RECORDS,
        help=f"records per direct append when loading (default {DEFAULT_BATCH_RECORDS:,})",
    )
    parser.add_argument(
        "--write-records", type=int, help=f"records written (default {DEFAULT_WRITE_RECORDS:,})"
    )
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument(
        "--materialize",
        choices=("noop", "aggregate"),
        default="noop",
        help="noop write of every column (default) or sum(length(key) + length(value))",
    )
    parser.add_argument("--skip-write", action="store_true", help="only the read cases")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_RECORDS:,} records read, {QUICK_WRITE_RECORDS:,} written",
    )
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--tmp-dir", type=Path, help="parent of the temp dir (default: $TMPDIR)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the random values")
    args = parser.parse_args(argv)
    args.records = args.records or (QUICK_RECORDS if args.quick else DEFAULT_RECORDS)
    args.write_records = args.write_records or (
        QUICK_WRITE_RECORDS if args.quick else DEFAULT_WRITE_RECORDS
    )
    return args


def _raise_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def run_cases(args, tmp_root: Path) -> tuple[list[Run], dict, dict]:
    root = str(tmp_root / "lake")
    log(
        f"loading {args.records:,} records into {args.partitions} partitions "
        f"({args.batch_records:,} records per append, small-file compaction after each) ..."
    )
    started = time.perf_counter()
    layout = load_topic(root, args.partitions, args.records, args.batch_records, args.seed)
    layout["load_s"] = round(time.perf_counter() - started, 1)
    log(
        f"  loaded in {layout['load_s']}s: files per partition {layout['files_per_partition']}, "
        f"{layout['bytes'] / 1e6:.0f} MB of Parquet"
    )
    log("breakdown of the lakelog read outside Spark (planning, pyarrow read_split) ...")
    breakdown = lakelog_breakdown(root, args.rounds)
    log(
        f"  planning {breakdown['plan_s']:.3f}s, pyarrow read {breakdown['pyarrow_read_s']:.2f}s "
        f"({breakdown['splits']} splits, {breakdown['arrow_batches']} Arrow batches)"
    )
    log(f"starting Spark ({args.master}) ...")
    started = time.perf_counter()
    spark = start_spark(args.master)
    log(f"  Spark {spark.version} ready in {time.perf_counter() - started:.1f}s")
    runs: list[Run] = []
    try:
        for source in ("lakelog", "delta"):
            log(f"read warm-up: {source} ...")
            runs.append(timed_read(spark, source, args, root, -1))
            log(f"  {runs[-1].seconds:.2f}s")
        counts = {
            "lakelog": lakelog_frame(spark, root).count(),
            "delta": delta_frame(spark, root, args.partitions).count(),
        }
        if set(counts.values()) != {args.records}:
            raise AssertionError(f"read counts {counts}, expected {args.records}")
        log(f"  both reads count {args.records:,} rows (ok)")
        for round_no in range(args.rounds):
            order = ("lakelog", "delta") if round_no % 2 == 0 else ("delta", "lakelog")
            for source in order:
                log(f"round {round_no + 1}/{args.rounds}: read {source} ({args.materialize}) ...")
                runs.append(timed_read(spark, source, args, root, round_no))
                log(f"  {runs[-1].seconds:.2f}s, {runs[-1].records_per_s:,.0f} records/s")
        if not args.skip_write:
            log(f"caching the write input ({args.write_records:,} records) ...")
            df = source_frame(spark, args.write_records)
            for source in ("lakelog", "delta"):
                log(f"write warm-up: {source} ...")
                runs.append(timed_write(df, source, args, root, tmp_root, f"warm-{source}", -1))
                log(f"  {runs[-1].seconds:.2f}s")
            for round_no in range(args.rounds):
                order = ("lakelog", "delta") if round_no % 2 == 0 else ("delta", "lakelog")
                for source in order:
                    log(f"round {round_no + 1}/{args.rounds}: write {source} ...")
                    name = f"w{round_no}-{source}"
                    runs.append(timed_write(df, source, args, root, tmp_root, name, round_no))
                    log(
                        f"  {runs[-1].seconds:.2f}s, {runs[-1].records_per_s:,.0f} records/s, "
                        f"files {runs[-1].extra['files']} (stored count ok)"
                    )
            df.unpersist()
    finally:
        spark.stop()
    return runs, layout, breakdown


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    load_before = [round(x, 2) for x in os.getloadavg()]
    tmp_root = Path(tempfile.mkdtemp(prefix="lakelog-spark-read-", dir=args.tmp_dir))
    machine = machine_info(tmp_root, extra_packages=("pyspark", "delta-spark"))
    log(f"command: {command}")
    log(f"machine: {json.dumps(machine)}")
    log(f"load average before: {load_before}; temp dir {tmp_root}")
    bench_start = time.perf_counter()
    try:
        runs, layout, breakdown = run_cases(args, tmp_root)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    total_s = time.perf_counter() - bench_start
    load_after = [round(x, 2) for x in os.getloadavg()]

    read_table, read_summary = render("read", runs)
    write_table, write_summary = render("write", runs)
    header = report_header(
        machine,
        command=command,
        code_details=f"Spark master {args.master}; total {total_s:.0f}s",
        load_before=load_before,
        load_after=load_after,
    )
    print("\n".join(header))
    print(
        f"payload: {KEY_BYTES}-byte key + {VALUE_BYTES}-byte value per record; MB = 10^6 bytes; "
        f"{args.rounds} rounds, median shown"
    )
    print()
    print(
        f"read: topic of {args.partitions} partitions, {args.records:,} records, files per "
        f"partition {layout['files_per_partition']} (largest {layout['largest_file_records']:,} "
        f"records), {layout['bytes'] / 1e6:.0f} MB of Parquet; materialized with "
        f"{args.materialize}"
    )
    print()
    print(read_table)
    print()
    per_round = ", ".join(f"{x:.2f}x" for x in read_summary["ratio_per_round"])
    if read_summary["ratio"] is not None:
        verdict = "HOLDS" if read_summary["ratio"] >= 0.8 else "DOES NOT HOLD"
        print(
            f"read lakelog / delta: {read_summary['ratio']:.2f}x (per round: {per_round}); "
            f"goal >= 0.8x -> {verdict}"
        )
    print(
        f"lakelog read outside Spark: planning {breakdown['plan_s']:.3f}s, pyarrow read_split of "
        f"all {breakdown['splits']} splits {breakdown['pyarrow_read_s']:.2f}s on one thread "
        f"({breakdown['rows']:,} rows, {breakdown['arrow_batches']} Arrow batches, "
        f"{breakdown['files']} files)"
    )
    if write_table.count("\n") > 1:
        print()
        print(
            f"write: {args.write_records:,} cached records into a fresh "
            f"{args.partitions}-partition topic (leaderRouting=direct) / a fresh plain Delta table"
        )
        print()
        print(write_table)
        print()
        per_round = ", ".join(f"{x:.2f}x" for x in write_summary["ratio_per_round"])
        print(f"write lakelog / delta: {write_summary['ratio']:.2f}x (per round: {per_round})")
    print()
    print(
        "CPU columns: % of one core during the timed run. driver = this Python process; Python "
        "workers = Spark's Python workers (executor reads/writes and the source's planning); "
        "other = every other process on the machine (noise)."
    )
    timed = [r for r in runs if r.round_no >= 0]
    noisy = [r for r in timed if r.cpu_other_s / r.seconds > NOISY_OTHER_CPU]
    if noisy:
        names = ", ".join(
            f"{r.case} {r.source} round {r.round_no + 1} ({100 * r.cpu_other_s / r.seconds:.0f}%)"
            for r in noisy
        )
        print(f"WARNING: other processes were busy during: {names}.")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "command": command,
                    "machine": machine,
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "total_seconds": round(total_s, 1),
                    "load_average_before": load_before,
                    "load_average_after": load_after,
                    "layout": layout,
                    "breakdown": breakdown,
                    "read": read_summary,
                    "write": write_summary,
                    "runs": [r.as_dict() for r in runs],
                },
                indent=2,
            )
        )
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
