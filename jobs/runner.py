"""Running a maintenance job over topic partitions, with Spark or in this process.

    python -m jobs.retention --data-dir s3://bucket/lakelog [--topic orders] [--dry-run]
    lakelog jobs run retention|compact-keys|optimize-files|vacuum [--topic T] [--dry-run]
    lakelog jobs schedule        # every job on its interval (LAKELOG_*_INTERVAL_MS)

With `--engine spark` (the default for `python -m jobs.*`, as on Databricks) each topic
partition is one Spark task running the executor (storage_layout/maintenance/execute.py)
where the data is; with
`--engine local` (the default of `lakelog jobs`, no JVM to start) they run here, one after the
other. Either way the driver prints the plan of each partition as it finishes ("[3/12] ..."),
then a summary; a rerun after a crash finishes the work (every step is planned again from the
tables). Exit codes: 0 done (or nothing to do), 1 some partitions failed (the others are done),
2 bad arguments or an unknown topic.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from conf.settings import Settings, load_settings
from storage_layout import paths, store
from storage_layout.errors import TopicNotFound
from storage_layout.maintenance.execute import Outcome, Unit
from storage_layout.maintenance.jobs import Summary, execute_unit, summarize
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.meta.consumer_offsets import ConsumerOffsets

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
ENGINE_SPARK, ENGINE_LOCAL = "spark", "local"


@dataclass(frozen=True, slots=True)
class JobRequest:
    job: str
    root: str
    topics: tuple[str, ...] = ()  # empty: every topic
    dry_run: bool = False
    engine: str = ENGINE_LOCAL
    vacuum_retention_ms: int = 7 * 24 * 3_600_000


def run_job(request: JobRequest, *, out: Callable[[str], None] = print) -> Summary:
    """Plan and execute `request` on every selected partition; print progress and the plan.

    Raises:
        TopicNotFound: a topic named in the request does not exist.
    """
    started = time.monotonic()
    units = partitions_of(request.root, request.topics)
    mode = f"{request.engine}, dry run" if request.dry_run else request.engine
    out(f"{request.job}: {len(units)} partitions ({mode})")
    outcomes = []
    for count, outcome in enumerate(_execute_all(request, units), start=1):
        outcomes.append(outcome)
        progress = f"[{count}/{len(units)}]"
        for line in outcome.lines:
            out(f"{progress} {line}")
        if outcome.error:
            out(f"{progress} {outcome.topic}-{outcome.partition}: FAILED: {outcome.error}")
        elif outcome.committed:
            out(f"{progress} {outcome.topic}-{outcome.partition}: done in {outcome.elapsed_ms} ms")
    if request.job == "optimize-files" and not request.dry_run:
        _drop_superseded_offsets(request.root, out)
    summary = summarize(request.job, outcomes, started)
    out(summary.line())
    return summary


def _drop_superseded_offsets(root: str, out: Callable[[str], None]) -> None:
    """The committed-offsets table keeps the latest row per (group, topic, partition); the
    gateways compact it too, this catches up tables no gateway is writing to."""
    dropped = ConsumerOffsets(root).keep_latest()
    out(f"_meta/consumer_offsets: {dropped} superseded rows dropped")


def partitions_of(root: str, topics: Iterable[str]) -> list[Unit]:
    catalog = TopicCatalog(root)
    known = catalog.topics()
    names = list(topics) or sorted(known)
    for name in names:
        if name not in known:
            raise TopicNotFound(name)
    return [Unit(root, name, p) for name in names for p in range(known[name].partitions)]


def _execute_all(request: JobRequest, units: list[Unit]) -> Iterator[Outcome]:
    task = functools.partial(
        execute_unit,
        request.job,
        now_ms=int(time.time() * 1000),  # one clock for the whole run, read on the driver
        dry_run=request.dry_run,
        vacuum_retention_ms=request.vacuum_retention_ms,
    )
    if request.engine == ENGINE_LOCAL or not units:
        return map(task, units)
    return _on_spark(_spark_session(), request.root, units, task)


# What a Spark task sends back per partition (an Outcome's fields).
_OUTCOME_DDL = (
    "job: string, topic: string, partition: int, lines: array<string>, segments: bigint, "
    "bytes_removed: bigint, records_removed: bigint, records_kept: bigint, "
    "files_deleted: bigint, elapsed_ms: bigint, committed: boolean, error: string"
)


def _on_spark(spark, root: str, units: list[Unit], task) -> Iterator[Outcome]:
    """One Spark task per partition. DataFrame API only (a Python UDF over a frame of the
    partitions), not RDDs: Databricks serverless and Spark Connect have no SparkContext.
    toLocalIterator hands outcomes back as their tasks finish, so progress shows during a
    long run."""
    from pyspark.sql import functions as F

    options = store.storage_options()  # explicit ones: the variables reach executors anyway

    def run_unit(topic: str, partition: int) -> dict:
        store.adopt(options)
        return dataclasses.asdict(task(Unit(root, topic, partition)))

    # Not Arrow-optimized: that path needs pandas, which a plain UDF does not.
    run = F.udf(run_unit, returnType=f"struct<{_OUTCOME_DDL}>", useArrow=False)
    rows = [(unit.topic, unit.partition) for unit in units]
    frame = spark.createDataFrame(rows, "topic string, partition int").repartition(len(units))
    for row in frame.select(run("topic", "partition").alias("o")).toLocalIterator():
        values = row.o.asDict()
        yield Outcome(**{**values, "lines": tuple(values["lines"] or ())})


def _spark_session():
    # Imported here: the local engine (and `lakelog jobs`) never needs a JVM.
    from pyspark.sql import SparkSession

    from pipeline.spark import build_spark_session

    return SparkSession.getActiveSession() or build_spark_session(load_settings())


# ---- command line --------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser, *, default_engine: str) -> None:
    settings = Settings()
    parser.add_argument(
        "--data-dir",
        default=settings.data_dir,
        help="storage root (default: $LAKELOG_DATA_DIR or %(default)s)",
    )
    parser.add_argument(
        "--topic", action="append", default=[], help="only this topic (repeatable; default: all)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    parser.add_argument(
        "--engine",
        choices=(ENGINE_SPARK, ENGINE_LOCAL),
        default=default_engine,
        help="run partitions as Spark tasks or in this process (default: %(default)s)",
    )
    parser.add_argument(
        "--retention-ms",
        type=int,
        default=settings.vacuum_retention_ms,
        help="vacuum: delete files removed longer ago than this (default: %(default)s)",
    )


def request_from(job: str, args: argparse.Namespace) -> JobRequest:
    return JobRequest(
        job=job,
        root=paths.normalize_root(args.data_dir),
        topics=tuple(args.topic),
        dry_run=args.dry_run,
        engine=args.engine,
        vacuum_retention_ms=args.retention_ms,
    )


def run_from_args(job: str, args: argparse.Namespace) -> int:
    try:
        store.configure(load_settings().storage_options)
        summary = run_job(request_from(job, args))
    except (TopicNotFound, ValueError) as error:
        print(f"{job}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_FAILED if summary.failed else EXIT_OK


def main_for(job: str, argv: list[str] | None = None) -> int:
    """`python -m jobs.<name>` and the wheel's `lakelog-<name>` entry points (Databricks).

    A failure exits (SystemExit) instead of returning its code: Databricks' wheel task calls
    the entry point and ignores what it returns, so only an exit or exception fails the run
    (and triggers the job's retries)."""
    parser = argparse.ArgumentParser(prog=f"lakelog-{job}", description=f"lakelog {job} job")
    add_arguments(parser, default_engine=ENGINE_SPARK)
    code = run_from_args(job, parser.parse_args(argv))
    if code != EXIT_OK:
        raise SystemExit(code)
    return code
