"""Spark streams from topics: readStream.format("lakelog") throughput and end-to-end delay.

Cases (local Spark session, `--master` default local[2]):

  (a) throughput  a topic of P partitions (default 4) holding N records (default 1 000 000;
                  8-byte keys, 100-byte random values), loaded before any clock starts as in
                  bench/spark_read.py (direct appends of 10 000 records, small-file compaction
                  after each). Each run is a fresh query with a fresh checkpoint and sink:
                    lakelog  spark.readStream.format("lakelog").option("subscribe", t)
                             .option("startingOffsets", "earliest") [maxOffsetsPerTrigger]
                    delta    the union of spark.readStream.format("delta").load(<partition
                             table>) over the P tables, selecting the same seven columns
                  -> writeStream.format("delta") into a fresh table, Trigger.AvailableNow; the
                  clock runs from start() to the end of awaitTermination(). Verified: the sink
                  holds N rows. records/s and lakelog / delta.
  (b) delay       a real gateway (`lakelog serve`, default settings) on a fresh root. A
                  producer sends R records/s (default 100) as requests of B records (default
                  10: one request every 100 ms, keyless, so the gateway spreads them over the
                  topic's partitions, default 1) to POST /topics/{t}; every value starts with
                  time.monotonic_ns() taken just before the POST (CLOCK_MONOTONIC: the same
                  clock in every process on the machine) and the record's sequence number.
                  Phases, each on a fresh topic, for D seconds of sending (default 10):
                    fetch        no Spark query: one consumer per partition long-polls
                                 GET /topics/{t}/partitions/{p}/records?offset=&timeout=1000;
                                 delay = receive time - send time. The baseline.
                    trigger T    (default 200 ms and 1 s) a readStream.format("lakelog") query
                                 (startingOffsets earliest) with Trigger.ProcessingTime(T) into
                                 a Delta sink, started and warmed up (its first micro-batch,
                                 the topic's warm-up records, visible in the sink) before the
                                 producer starts. A watcher thread polls the sink with
                                 deltalake every --poll-ms (default 10 ms: DeltaTable
                                 update_incremental; on a new version it reads the new files'
                                 values); delay = when a record was first seen - send time,
                                 so it includes up to one poll interval. The long-polling
                                 consumers run meanwhile too, on the same records (their
                                 delays show what the running query costs the gateway path).
                  Verified: every record sent is seen exactly once by the fetch consumers and
                  (trigger phases) exactly once in the sink. p50/p95/p99/max per phase; the
                  ratio to the fetch phase's percentile, and what the sink adds at p50. The
                  query's progress reports give the median micro-batch durations.
                    --noop-trigger T  one more phase: the same query into a noop sink
                                 (no delay measured): its micro-batch durations show what
                                 the lakelog source costs per batch without the Delta sink.

Each case runs in rounds (default 3), the phases / sources interleaved within a round so drift
in the load hits all alike; tables show the median round (throughput: the run with the median
time; delay: the median over rounds of each percentile) and list every round. Throughput also
runs once as an uncounted warm-up per source.

Usage: .venv/bin/python bench/spark_stream.py [--records N] [--partitions P] [--rounds R]
           [--max-offsets-per-trigger M] [--rate R] [--batch B] [--seconds D]
           [--triggers 200ms,1s] [--noop-trigger 200ms] [--delay-partitions P] [--poll-ms MS]
           [--skip-throughput] [--skip-delay] [--quick] [--master local[2]] [--json out.json]
           [--tmp-dir DIR]
Progress goes to stderr, markdown tables to stdout. About 3.5 minutes at the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import struct
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import orjson  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from deltalake import DeltaTable  # noqa: E402
from deltalake.exceptions import TableNotFoundError  # noqa: E402

from bench.produce_fetch import machine_info, report_header  # noqa: E402
from bench.raw_http import RawConnection, RawResponse  # noqa: E402
from bench.spark_read import (  # noqa: E402
    NOISY_OTHER_CPU,
    RECORD_BYTES,
    CpuMeter,
    Run,
    delta_union,
    load_topic,
    log,
    median_run,
    start_spark,
)
from tests.gateway_process import GatewayProcess, start_gateway  # noqa: E402

DEFAULT_RECORDS = 1_000_000
DEFAULT_PARTITIONS = 4
DEFAULT_ROUNDS = 3
DEFAULT_RATE = 100
DEFAULT_BATCH = 10
DEFAULT_SECONDS = 10.0
DEFAULT_TRIGGERS = "200ms,1s"
DEFAULT_POLL_MS = 10.0
QUICK_RECORDS = 200_000
QUICK_SECONDS = 6.0
LOAD_BATCH_RECORDS = 10_000
THROUGHPUT_TOPIC = "stream"
VALUE_BYTES = 100
WARMUP_REQUESTS = 3
WARMUP_SEQ = -1
FETCH_TIMEOUT_MS = 1000
DRAIN_TIMEOUT_S = 60.0
QUERY_READY_TIMEOUT_S = 180.0
PRODUCE_TYPE = "application/vnd.kafka.binary.v2+json"
PRODUCE_HEADERS = {"Content-Type": PRODUCE_TYPE}
FETCH_HEADERS = {"Accept": PRODUCE_TYPE}
CLUSTER = "lakelog"
SINK_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
_VALUE_HEAD = struct.Struct(">qq")  # send time (monotonic ns), sequence number
_PAD = b"x" * (VALUE_BYTES - _VALUE_HEAD.size)


# ---- (a) throughput --------------------------------------------------------------------------


def lakelog_stream(spark, root: str, topic: str, max_offsets: int | None):
    reader = (
        spark.readStream.format("lakelog")
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    return reader.load(root).select(*SINK_COLUMNS)


def delta_stream(spark, root: str, topic: str, partitions: int):
    return delta_union(spark.readStream, root, topic, partitions)


def timed_available_now(spark, source: str, args, root: str, tmp_root: Path, round_no: int):
    name = f"{source}-r{round_no}" if round_no >= 0 else f"{source}-warm"
    sink = str(tmp_root / "sinks" / name)
    checkpoint = str(tmp_root / "checkpoints" / name)
    meter, start = CpuMeter(), time.perf_counter()
    if source == "lakelog":
        frame = lakelog_stream(spark, root, THROUGHPUT_TOPIC, args.max_offsets_per_trigger)
    else:
        frame = delta_stream(spark, root, THROUGHPUT_TOPIC, args.partitions)
    query = (
        frame.writeStream.format("delta")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(sink)
    )
    query.awaitTermination()
    seconds = time.perf_counter() - start
    run = Run("stream", source, round_no, args.records, seconds, **meter.stop())
    if query.exception() is not None:
        raise RuntimeError(f"{source} stream failed: {query.exception()}")
    stored = DeltaTable(sink).to_pyarrow_dataset().count_rows()
    if stored != args.records:
        raise AssertionError(f"{source} stream: {stored} rows in the sink, {args.records} loaded")
    batches = [p for p in query.recentProgress if p.numInputRows > 0]
    run.extra["micro_batches"] = len(batches)
    return run


def bench_throughput(spark, args, tmp_root: Path) -> tuple[list[Run], dict]:
    root = str(tmp_root / "lake")
    log(f"loading {args.records:,} records into {args.partitions} partitions ...")
    started = time.perf_counter()
    layout = load_topic(
        root, args.partitions, args.records, LOAD_BATCH_RECORDS, args.seed, THROUGHPUT_TOPIC
    )
    layout["load_s"] = round(time.perf_counter() - started, 1)
    log(f"  loaded in {layout['load_s']}s: files per partition {layout['files_per_partition']}")
    runs = []
    for source in ("lakelog", "delta"):
        log(f"throughput warm-up: {source} ...")
        runs.append(timed_available_now(spark, source, args, root, tmp_root, -1))
        log(f"  {runs[-1].seconds:.2f}s")
    for round_no in range(args.rounds):
        order = ("lakelog", "delta") if round_no % 2 == 0 else ("delta", "lakelog")
        for source in order:
            log(f"round {round_no + 1}/{args.rounds}: AvailableNow {source} -> Delta sink ...")
            runs.append(timed_available_now(spark, source, args, root, tmp_root, round_no))
            log(
                f"  {runs[-1].seconds:.2f}s, {runs[-1].records_per_s:,.0f} records/s, "
                f"{runs[-1].extra['micro_batches']} micro-batch(es), sink count ok"
            )
    return runs, layout


# ---- (b) delay -------------------------------------------------------------------------------


def parse_trigger(text: str) -> tuple[str, str]:
    """'200ms' -> ('200 ms', '200 milliseconds'); '1s' -> ('1 s', '1 seconds')."""
    text = text.strip().lower()
    if text.endswith("ms"):
        number, unit, spark_unit = text[:-2], "ms", "milliseconds"
    elif text.endswith("s"):
        number, unit, spark_unit = text[:-1], "s", "seconds"
    else:
        raise ValueError(f"trigger {text!r}: give it as e.g. 200ms or 1s")
    return f"{int(number)} {unit}", f"{int(number)} {spark_unit}"


def encode_value(send_ns: int, seq: int) -> str:
    return base64.b64encode(_VALUE_HEAD.pack(send_ns, seq) + _PAD).decode()


def decode_value(value: bytes) -> tuple[int, int]:
    return _VALUE_HEAD.unpack_from(value)


def create_topic(url: str, topic: str, partitions: int) -> None:
    body = {"topic_name": topic, "partitions_count": partitions}
    response = httpx.post(f"{url}/v3/clusters/{CLUSTER}/topics", json=body, timeout=60)
    if response.status_code != 201:
        raise RuntimeError(f"create topic {topic}: HTTP {response.status_code} {response.text}")


def end_offset(url: str, topic: str, partition: int) -> int:
    response = httpx.get(f"{url}/topics/{topic}/partitions/{partition}/offsets", timeout=60)
    response.raise_for_status()
    return response.json()["end_offset"]


def _acked(response: RawResponse | httpx.Response) -> bool:
    status = response.status if isinstance(response, RawResponse) else response.status_code
    body = response.body if isinstance(response, RawResponse) else response.content
    if status != 200:
        return False
    return all(entry.get("error_code") is None for entry in orjson.loads(body)["offsets"])


class SinkWatcher(threading.Thread):
    """Polls a Delta table with deltalake; notes when each sequence number first shows up."""

    def __init__(self, sink: str, poll_s: float) -> None:
        super().__init__(name="sink-watcher", daemon=True)
        self.sink, self.poll_s = sink, poll_s
        self.seen: dict[int, int] = {}  # seq -> monotonic ns of the poll that saw it
        self.duplicates = 0
        self.polls = 0
        self.versions = 0
        self.poll_cpu_s = 0.0
        self._files: set[str] = set()
        self._stop_event = threading.Event()
        self.error: BaseException | None = None
        self.ready = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)

    def run(self) -> None:
        try:
            self._watch()
        except BaseException as error:  # reported by the main thread
            self.error = error
            self.ready.set()

    def _watch(self) -> None:
        table, version = None, None
        while not self._stop_event.is_set():
            cpu_before = time.thread_time()
            try:
                if table is None:
                    table = DeltaTable(self.sink)
                else:
                    table.update_incremental()
            except TableNotFoundError:
                table = None
            if table is not None and table.version() != version:
                now = time.monotonic_ns()
                first = version is None
                version = table.version()
                self.versions += 1
                self._read_new_files(table, None if first else now)
                if first:
                    self.ready.set()
            self.polls += 1
            self.poll_cpu_s += time.thread_time() - cpu_before
            self._stop_event.wait(self.poll_s)

    def _read_new_files(self, table: DeltaTable, now: int | None) -> None:
        for uri in table.file_uris():
            if uri in self._files:
                continue
            self._files.add(uri)
            if now is None:
                continue  # what was there when the watcher started (the warm-up records)
            for value in pq.read_table(uri, columns=["value"]).column("value").to_pylist():
                _, seq = decode_value(value)
                if seq == WARMUP_SEQ:
                    continue
                if seq in self.seen:
                    self.duplicates += 1
                else:
                    self.seen[seq] = now


@dataclass
class DelayRun:
    phase: str  # "fetch", or the trigger ("200 ms")
    round_no: int
    sent: dict[int, int] = field(default_factory=dict)  # seq -> send ns
    fetched: dict[int, int] = field(default_factory=dict)  # seq -> receive ns
    fetch_duplicates: int = 0
    sink_seen: dict[int, int] = field(default_factory=dict)
    sink_duplicates: int = 0
    seconds: float = 0.0
    errors: int = 0
    batch_durations: dict[str, float] = field(default_factory=dict)  # median ms per step
    micro_batches: int = 0
    poll_ms: float | None = None
    watcher_cpu_s: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)  # over cpu_window_s (send + drain)
    cpu_window_s: float = 0.0

    def delays_ms(self, where: str) -> list[float]:
        seen = self.fetched if where == "fetch" else self.sink_seen
        return sorted((seen[seq] - sent) / 1e6 for seq, sent in self.sent.items() if seq in seen)


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


async def _produce_and_fetch(url: str, topic: str, starts: list[int], run: DelayRun, args):
    """One producer task sends a request every batch / rate seconds (slot i due at start +
    i x interval, on 2 connections so a slow answer does not delay the next send); one
    long-polling consumer per partition."""
    interval_s = args.batch / args.rate
    start = time.monotonic() + 0.2
    deadline = start + args.seconds
    slots = itertools.count()
    producers_done = asyncio.Event()

    async def produce() -> None:
        connection = await RawConnection.open(url)
        try:
            while (due := start + (slot := next(slots)) * interval_s) < deadline:
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                seqs = range(slot * args.batch, (slot + 1) * args.batch)
                send_ns = time.monotonic_ns()
                records = [{"value": encode_value(send_ns, seq)} for seq in seqs]
                body = orjson.dumps({"records": records})
                response = await connection.request(
                    "POST", f"/topics/{topic}", body, PRODUCE_HEADERS
                )
                if _acked(response):
                    for seq in seqs:
                        run.sent[seq] = send_ns
                else:
                    run.errors += 1
        finally:
            await connection.close()

    async def consume(partition: int) -> None:
        offset = starts[partition]
        connection = await RawConnection.open(url)
        path = f"/topics/{topic}/partitions/{partition}/records"
        try:
            while not (producers_done.is_set() and len(run.fetched) >= len(run.sent)):
                target = f"{path}?offset={offset}&timeout={FETCH_TIMEOUT_MS}"
                response = await connection.request("GET", target, headers=FETCH_HEADERS)
                now = time.monotonic_ns()
                if response.status != 200:
                    raise RuntimeError(f"fetch: HTTP {response.status} {response.body[:200]!r}")
                records = orjson.loads(response.body)
                for record in records:
                    _, seq = decode_value(base64.b64decode(record["value"]))
                    if seq in run.fetched:
                        run.fetch_duplicates += 1
                    else:
                        run.fetched[seq] = now
                if records:
                    offset = records[-1]["offset"] + 1
        finally:
            await connection.close()

    consumers = [asyncio.create_task(consume(p)) for p in range(len(starts))]
    await asyncio.gather(produce(), produce())
    run.seconds = time.monotonic() - start
    producers_done.set()
    await asyncio.wait_for(asyncio.gather(*consumers), DRAIN_TIMEOUT_S)


def _warm_up_topic(url: str, topic: str, batch: int) -> None:
    body = orjson.dumps({"records": [{"value": encode_value(0, WARMUP_SEQ)}] * batch})
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(WARMUP_REQUESTS):
            response = client.post(f"/topics/{topic}", content=body, headers=PRODUCE_HEADERS)
            if not _acked(response):
                raise RuntimeError(f"warm-up produce: HTTP {response.status_code} {response.text}")


def _progress_durations(progress) -> tuple[int, dict[str, float]]:
    """Micro-batches that read records, and the median of each durationMs step over them."""
    batches = [p for p in progress if p.numInputRows > 0]
    steps: dict[str, list[float]] = {}
    for progress in batches:
        for step, ms in progress.durationMs.items():
            steps.setdefault(step, []).append(float(ms))
    return len(batches), {step: statistics.median(values) for step, values in steps.items()}


@dataclass(frozen=True)
class Phase:
    label: str  # "fetch", "200 ms", "200 ms, noop sink"
    interval: str | None = None  # Spark's processingTime; None: no query
    sink: str | None = None  # "delta" or "noop"


def delay_phases(args) -> list[Phase]:
    phases = [Phase("fetch")]
    for text in args.triggers.split(","):
        label, interval = parse_trigger(text)
        phases.append(Phase(label, interval, "delta"))
    if args.noop_trigger:
        label, interval = parse_trigger(args.noop_trigger)
        phases.append(Phase(f"{label}, noop sink", interval, "noop"))
    return phases


def _rows_read(query) -> int:
    return sum(p.numInputRows for p in query.recentProgress)


def _start_query(spark, gateway: GatewayProcess, phase: Phase, topic: str, tmp_root: Path):
    frame = lakelog_stream(spark, str(gateway.data_dir), topic, None)
    writer = (
        frame.writeStream.format(phase.sink)
        .option("checkpointLocation", str(tmp_root / "delay-checkpoints" / topic))
        .trigger(processingTime=phase.interval)
    )
    if phase.sink == "delta":
        return writer.start(str(tmp_root / "delay-sinks" / topic))
    return writer.start()


def _wait(condition, query, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if query is not None and query.exception() is not None:
            raise RuntimeError(f"{what}: the query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not done within {timeout_s:g}s")
        time.sleep(0.05)


def delay_phase(spark, gateway: GatewayProcess, phase: Phase, round_no: int, args, tmp_root):
    """One phase on a fresh topic: warm-up records, the query (if any) started and through
    its first micro-batch, then D seconds of producing, then until every record arrived."""
    topic = f"delay-{phase.label.replace(' ', '').replace(',', '-')}-r{round_no}"
    url = gateway.url
    create_topic(url, topic, args.delay_partitions)
    _warm_up_topic(url, topic, args.batch)
    warm_records = WARMUP_REQUESTS * args.batch
    starts = [end_offset(url, topic, p) for p in range(args.delay_partitions)]
    run = DelayRun(phase.label, round_no)
    query = watcher = None
    try:
        if phase.interval is not None:
            query = _start_query(spark, gateway, phase, topic, tmp_root)
            if phase.sink == "delta":
                watcher = SinkWatcher(str(tmp_root / "delay-sinks" / topic), args.poll_ms / 1000)
                watcher.start()
                run.poll_ms = args.poll_ms
                ready = watcher.ready.is_set
            else:
                ready = lambda: _rows_read(query) >= warm_records  # noqa: E731
            _wait(ready, query, f"first micro-batch of {topic}", QUERY_READY_TIMEOUT_S)
            if watcher is not None and watcher.error is not None:
                raise watcher.error
            batches_before = len(query.recentProgress)
        meter, metered_from = CpuMeter(), time.monotonic()
        watcher_cpu_from = 0.0 if watcher is None else watcher.poll_cpu_s
        asyncio.run(_produce_and_fetch(url, topic, starts, run, args))
        if watcher is not None:
            _wait(lambda: len(watcher.seen) >= len(run.sent), query, topic, DRAIN_TIMEOUT_S)
        elif query is not None:
            total = warm_records + len(run.sent)
            _wait(lambda: _rows_read(query) >= total, query, topic, DRAIN_TIMEOUT_S)
        run.cpu = meter.stop()
        run.cpu_window_s = time.monotonic() - metered_from
        if watcher is not None:
            run.watcher_cpu_s = watcher.poll_cpu_s - watcher_cpu_from
    finally:
        if watcher is not None:
            watcher.stop()
        if query is not None:
            query.stop()
    if watcher is not None:
        if watcher.error is not None:
            raise watcher.error
        run.sink_seen, run.sink_duplicates = watcher.seen, watcher.duplicates
    if query is not None:
        progress = query.recentProgress[batches_before:]
        run.micro_batches, run.batch_durations = _progress_durations(progress)
    missing_fetch = len(run.sent) - len(set(run.sent) & set(run.fetched))
    missing_sink = 0 if watcher is None else len(run.sent) - len(set(run.sent) & set(run.sink_seen))
    if run.errors or missing_fetch or missing_sink or run.fetch_duplicates or run.sink_duplicates:
        raise AssertionError(
            f"{topic}: {run.errors} failed requests, {missing_fetch} records not fetched, "
            f"{missing_sink} not in the sink, duplicates fetch {run.fetch_duplicates} / sink "
            f"{run.sink_duplicates}"
        )
    return run


def bench_delay(spark, args, tmp_root: Path) -> list[DelayRun]:
    phases = delay_phases(args)
    runs: list[DelayRun] = []
    log("starting the gateway ...")
    gateway = start_gateway(tmp_root / "gateway" / "data")
    try:
        log(f"  gateway pid {gateway.process.pid} at {gateway.url}")
        for round_no in range(args.rounds):
            order = phases if round_no % 2 == 0 else [phases[0], *reversed(phases[1:])]
            for phase in order:
                log(
                    f"round {round_no + 1}/{args.rounds}: delay, {phase.label}: {args.rate} "
                    f"records/s in {args.batch}-record requests for {args.seconds:g}s ..."
                )
                run = delay_phase(spark, gateway, phase, round_no, args, tmp_root)
                runs.append(run)
                fetch = run.delays_ms("fetch")
                message = (
                    f"  {len(run.sent)} records; fetch p50 {percentile(fetch, 50):.1f} ms "
                    f"p99 {percentile(fetch, 99):.1f} ms"
                )
                if run.sink_seen:
                    sink = run.delays_ms("sink")
                    message += (
                        f"; sink p50 {percentile(sink, 50):.0f} ms p99 {percentile(sink, 99):.0f}"
                        " ms"
                    )
                if run.micro_batches:
                    message += (
                        f"; {run.micro_batches} micro-batches, median "
                        f"{run.batch_durations.get('triggerExecution', 0):.0f} ms"
                    )
                log(message + " (all seen once: ok)")
    except Exception:
        try:
            log("gateway log (last 30 lines):\n" + "\n".join(gateway.log_text().splitlines()[-30:]))
        except OSError:
            pass
        raise
    finally:
        gateway.stop()
    return runs


# ---- report ----------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render_throughput(runs: list[Run]) -> tuple[str, dict]:
    header = (
        "| source | records | median s | records/s | MB/s | lakelog / delta | micro-batches "
        "| warm-up s | s of each round | driver CPU | JVM CPU | Python workers CPU | other CPU |"
    )
    lines = [header, "|" + "|".join(["---"] * (header.count("|") - 1)) + "|"]
    medians = {}
    for source in ("lakelog", "delta"):
        timed = [r for r in runs if r.source == source and r.round_no >= 0]
        if timed:
            medians[source] = median_run(timed)
    ratio = None
    if len(medians) == 2:
        ratio = medians["lakelog"].records_per_s / medians["delta"].records_per_s
    per_round = []
    for round_no in sorted({r.round_no for r in runs if r.round_no >= 0}):
        pair = {r.source: r for r in runs if r.round_no == round_no}
        if len(pair) == 2:
            per_round.append(pair["lakelog"].records_per_s / pair["delta"].records_per_s)
    for source, m in medians.items():
        warm = next((r for r in runs if r.source == source and r.round_no < 0), None)
        rounds = " / ".join(
            f"{r.seconds:.2f}" for r in runs if r.source == source and r.round_no >= 0
        )

        def cpu(seconds: float, m: Run = m) -> str:
            return f"{100 * seconds / m.seconds:.0f}%"

        lines.append(
            f"| {source} | {m.records:,} | {m.seconds:.2f} | {_fmt(m.records_per_s)} "
            f"| {_fmt(m.records_per_s * RECORD_BYTES / 1e6, 1)} "
            f"| {f'{ratio:.2f}x' if source == 'lakelog' and ratio is not None else '-'} "
            f"| {m.extra.get('micro_batches', '-')} "
            f"| {'-' if warm is None else f'{warm.seconds:.2f}'} | {rounds} "
            f"| {cpu(m.cpu_driver_s)} | {cpu(m.cpu_jvm_s)} | {cpu(m.cpu_workers_s)} "
            f"| {cpu(m.cpu_other_s)} |"
        )
    summary = {
        "ratio": None if ratio is None else round(ratio, 3),
        "ratio_per_round": [round(x, 3) for x in per_round],
    }
    return "\n".join(lines), summary


def _median_of(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def delay_summary(runs: list[DelayRun]) -> tuple[list[dict], list[dict]]:
    """Delay rows, one per (phase, where) with percentiles as medians over the rounds; and
    micro-batch rows, one per phase with a query."""
    rows, batch_rows = [], []
    for phase in dict.fromkeys(r.phase for r in runs):
        of_phase = [r for r in runs if r.phase == phase]
        wheres = ["sink", "fetch"] if any(r.sink_seen for r in of_phase) else ["fetch"]
        for where in wheres:
            per_round = [r.delays_ms(where) for r in of_phase]
            row = {
                "phase": phase,
                "where": where,
                "records": [len(d) for d in per_round],
                "p50_rounds": [percentile(d, 50) for d in per_round],
                "other_cpu_pct": _median_of(
                    [
                        100 * r.cpu.get("cpu_other_s", 0) / r.cpu_window_s
                        for r in of_phase
                        if r.cpu_window_s
                    ]
                ),
            }
            for q in (50, 95, 99, 100):
                row[f"p{q}"] = _median_of([percentile(d, q) for d in per_round])
            rows.append(row)
        if any(r.micro_batches for r in of_phase):
            steps = {s for r in of_phase for s in r.batch_durations}
            watched = [r for r in of_phase if r.poll_ms is not None and r.cpu_window_s]
            batch_rows.append(
                {
                    "phase": phase,
                    "micro_batches": [r.micro_batches for r in of_phase],
                    "batch_ms": {
                        s: _median_of([r.batch_durations.get(s) for r in of_phase])
                        for s in sorted(steps)
                    },
                    "poll_ms": of_phase[0].poll_ms,
                    "watcher_cpu_pct": _median_of(
                        [100 * r.watcher_cpu_s / r.cpu_window_s for r in watched]
                    ),
                }
            )
    return rows, batch_rows


def render_delay(rows: list[dict]) -> str:
    baseline = next((r for r in rows if r["phase"] == "fetch"), None)
    header = (
        "| phase | delay measured at | records/round | p50 ms | p95 ms | p99 ms | max ms "
        "| p50 / fetch p50 | p99 / fetch p99 | adds at p50 ms | p50 ms of each round | other CPU |"
    )
    lines = [header, "|" + "|".join(["---"] * (header.count("|") - 1)) + "|"]
    for row in rows:
        where = "HTTP long-poll fetch" if row["where"] == "fetch" else "Delta sink (deltalake poll)"
        if row["phase"] != "fetch" and row["where"] == "fetch":
            where += ", query running"
        ratio50 = ratio99 = adds = "-"
        if baseline and row is not baseline and baseline["p50"] and baseline["p99"]:
            ratio50 = f"{row['p50'] / baseline['p50']:.1f}x"
            ratio99 = f"{row['p99'] / baseline['p99']:.1f}x"
            adds = f"{row['p50'] - baseline['p50']:,.0f}"
        phase = "fetch only" if row["phase"] == "fetch" else f"trigger {row['phase']}"
        rounds = " / ".join(_fmt(v, 1) for v in row["p50_rounds"])
        lines.append(
            f"| {phase} | {where} | {statistics.median(row['records']):,.0f} "
            f"| {_fmt(row['p50'], 1)} | {_fmt(row['p95'], 1)} | {_fmt(row['p99'], 1)} "
            f"| {_fmt(row['p100'], 1)} | {ratio50} | {ratio99} | {adds} | {rounds} "
            f"| {_fmt(row['other_cpu_pct'])}% |"
        )
    return "\n".join(lines)


def render_batches(batch_rows: list[dict]) -> str:
    if not batch_rows:
        return ""
    preferred = [
        "triggerExecution",
        "latestOffset",
        "queryPlanning",
        "walCommit",
        "addBatch",
        "commitOffsets",
    ]
    present = {s for r in batch_rows for s in r["batch_ms"]}
    steps = [s for s in preferred if s in present] + sorted(present - set(preferred))
    header = (
        "| trigger | micro-batches/round | " + " | ".join(steps) + " | sink poll ms | watcher CPU |"
    )
    lines = [header, "|" + "|".join(["---"] * (header.count("|") - 1)) + "|"]
    for row in batch_rows:
        cells = " | ".join(_fmt(row["batch_ms"].get(s)) for s in steps)
        batches = " / ".join(str(b) for b in row["micro_batches"])
        watcher = "-" if row["watcher_cpu_pct"] is None else f"{row['watcher_cpu_pct']:.1f}%"
        lines.append(
            f"| {row['phase']} | {batches} | {cells} | {_fmt(row['poll_ms'])} | {watcher} |"
        )
    return "\n".join(lines)


# ---- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--records", type=int, help=f"throughput: records loaded (default {DEFAULT_RECORDS:,})"
    )
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        help="throughput: maxOffsetsPerTrigger of the lakelog stream (default: none, one batch)",
    )
    parser.add_argument("--rate", type=int, default=DEFAULT_RATE, help="delay: records/s")
    parser.add_argument("--batch", type=int, default=DEFAULT_BATCH, help="delay: records/request")
    parser.add_argument(
        "--seconds", type=float, help=f"delay: sending time per phase ({DEFAULT_SECONDS:g})"
    )
    parser.add_argument(
        "--triggers",
        default=DEFAULT_TRIGGERS,
        help=f"delay: processingTime triggers, comma-separated (default {DEFAULT_TRIGGERS})",
    )
    parser.add_argument(
        "--noop-trigger",
        help="delay: also run a phase with this trigger into a noop sink (e.g. 200ms): the "
        "micro-batch durations without the Delta sink (no delay is measured there)",
    )
    parser.add_argument(
        "--delay-partitions", type=int, default=1, help="delay: partitions of each topic (1)"
    )
    parser.add_argument(
        "--poll-ms", type=float, default=DEFAULT_POLL_MS, help="delay: sink poll interval (10)"
    )
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-delay", action="store_true")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_RECORDS:,} records, {QUICK_SECONDS:g}s per delay phase",
    )
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--tmp-dir", type=Path, help="parent of the temp dir (default: $TMPDIR)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the random values")
    args = parser.parse_args(argv)
    args.records = args.records or (QUICK_RECORDS if args.quick else DEFAULT_RECORDS)
    args.seconds = args.seconds or (QUICK_SECONDS if args.quick else DEFAULT_SECONDS)
    return args


def _raise_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    load_before = [round(x, 2) for x in os.getloadavg()]
    tmp_root = Path(tempfile.mkdtemp(prefix="lakelog-spark-stream-", dir=args.tmp_dir))
    machine = machine_info(tmp_root, extra_packages=("pyspark", "delta-spark"))
    log(f"command: {command}")
    log(f"machine: {json.dumps(machine)}")
    log(f"load average before: {load_before}; temp dir {tmp_root}")
    bench_start = time.perf_counter()
    throughput: list[Run] = []
    layout: dict = {}
    delays: list[DelayRun] = []
    try:
        log(f"starting Spark ({args.master}) ...")
        started = time.perf_counter()
        spark = start_spark(args.master)
        log(f"  Spark {spark.version} ready in {time.perf_counter() - started:.1f}s")
        try:
            if not args.skip_throughput:
                throughput, layout = bench_throughput(spark, args, tmp_root)
            if not args.skip_delay:
                delays = bench_delay(spark, args, tmp_root)
        finally:
            spark.stop()
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    total_s = time.perf_counter() - bench_start
    load_after = [round(x, 2) for x in os.getloadavg()]

    header = report_header(
        machine,
        command=command,
        code_details=f"Spark master {args.master}; total {total_s:.0f}s",
        load_before=load_before,
        load_after=load_after,
    )
    print("\n".join(header))
    summary: dict = {}
    if throughput:
        table, summary = render_throughput(throughput)
        print()
        print(
            f"(a) throughput: Trigger.AvailableNow -> Delta sink, {args.records:,} records in "
            f"{args.partitions} partitions (files per partition {layout['files_per_partition']}), "
            f"maxOffsetsPerTrigger {args.max_offsets_per_trigger or 'none'}; {args.rounds} rounds, "
            "median shown"
        )
        print()
        print(table)
        print()
        per_round = ", ".join(f"{x:.2f}x" for x in summary["ratio_per_round"])
        print(f"stream lakelog / delta: {summary['ratio']:.2f}x (per round: {per_round})")
        noisy = [
            r for r in throughput if r.round_no >= 0 and r.cpu_other_s / r.seconds > NOISY_OTHER_CPU
        ]
        if noisy:
            names = ", ".join(
                f"{r.source} round {r.round_no + 1} ({100 * r.cpu_other_s / r.seconds:.0f}%)"
                for r in noisy
            )
            print(f"WARNING: other processes were busy during: {names}.")
    rows: list[dict] = []
    batch_rows: list[dict] = []
    if delays:
        rows, batch_rows = delay_summary(delays)
        print()
        print(
            f"(b) delay from HTTP produce to visibility: {args.rate} records/s in "
            f"{args.batch}-record requests, {args.seconds:g}s per phase, "
            f"{args.delay_partitions} partition(s); "
            f"percentiles are medians over {args.rounds} rounds"
        )
        print()
        print(render_delay(rows))
        print()
        print(
            "median micro-batch durations (ms, Spark's progress durationMs, batches with records):"
        )
        print()
        print(render_batches(batch_rows))
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
                    "throughput": summary,
                    "throughput_runs": [r.as_dict() for r in throughput],
                    "delay": rows,
                    "micro_batches": batch_rows,
                },
                indent=2,
                default=str,
            )
        )
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
