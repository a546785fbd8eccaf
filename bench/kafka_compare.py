"""Kafka wire protocol: lakelog's Kafka listener side by side with Apache Kafka, in one run.

Both servers run on loopback as child processes of this bench: `lakelog serve --kafka-port`
(scheduled maintenance off, Delta tables on the temp dir's disk) and Apache Kafka 4.1.1 in KRaft
combined mode (one node, broker and controller; -Xmx1G -Xms1G and the GC flags of
kafka-server-start.sh), started from Maven Central jars (tests/apache_kafka.py, downloaded once
into .venv/kafka-4.1.1/libs). The same client (confluent-kafka / librdkafka) sends the same
records (100-byte values, 8-byte keys, cycled from 10 000 prebuilt random ones) to a fresh
1-partition topic per case, with the same settings on both sides: acks=all,
enable.idempotence=false, linger.ms=5, batch.size 1 MB, at most 5 requests in flight (the Java
client's default; librdkafka's is 1 000 000), no compression (see PRODUCER).

Systems: "lakelog" (acknowledges after a durable Delta commit on local disk), "kafka" (Kafka's
default flushing: the page cache, no fsync per message) and "kafka-fsync" (a topic with
flush.messages=1: Kafka fsyncs the log after every append).

Cases:

  rounds-100    produce 100 records, flush() (waits for every acknowledgement), repeat for the
                case's duration: acknowledged records/s.
  rounds-1000   the same with rounds of 1 000 records.
  batching      produce continuously and let the client batch (linger.ms=5, batch.size 1 MB, at
                most QUEUE_MESSAGES_MAX records queued: produce() waits on poll() when full);
                flush() at the end, whose time counts: acknowledged records/s.
  latency-R-lingerL
                produce -> consume at a fixed R = 1 000 and 10 000 records/s for the case's
                duration, with the producer's linger.ms = L, 5 (the setting of every other case,
                librdkafka's default) and 0 (each record sent at once, as a latency-minded client
                would; --latency-linger-ms picks others). The producer paces by the clock and
                stamps time.monotonic_ns() into the first 8 bytes of each value just before
                produce(); a consumer in another thread of this process, assign()ed to the
                partition (fetch.min.bytes=1, fetch.wait.max.ms=100: both servers answer a
                waiting fetch as soon as records arrive), takes the receive time. p50/p99/max in
                ms, records sent and received (records not in within DRAIN_TIMEOUT_S of the end
                count as missing).

Both servers are warmed up first (a fresh JVM runs interpreted for its first seconds): rounds
of 100, then client batching, for WARMUP_S each (--quick: less), then the warm-up topic is read
back; the warm-up is discarded. Cases run back to back per case (lakelog, kafka, kafka-fsync),
so a burst of load from other processes hits all three alike. Each run is verified: no delivery
report carries an error, nothing is left unsent, and the partition's high watermark (ListOffsets)
equals the records acknowledged; latency runs check that records arrive in offset order with
no gap, and count the ones that did not arrive. CPU seconds of this process (the client:
Python and librdkafka's threads), of the server process and of everything else on the machine
are measured per run: on 2 cores the Python client can be the bottleneck.

Usage: .venv/bin/python bench/kafka_compare.py [--seconds S] [--quick] [--json PATH]
           [--skip-kafka] [--latency-linger-ms MS [MS ...]] [--cases C,C] [--tmp-dir DIR]
Progress goes to stderr, the results tables to stdout. A full run takes about 4.5 minutes (and a
one-off download of Kafka's jars, tests/apache_kafka.py), --quick about 1.5 minutes. Exit code 1
if a run failed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.produce_fetch import CpuMeter, log, machine_info, report_header  # noqa: E402
from tests.apache_kafka import KAFKA_VERSION, KafkaBroker, start_kafka  # noqa: E402
from tests.gateway_process import GatewayProcess, start_gateway  # noqa: E402

VALUE_BYTES = 100
KEY_BYTES = 8
DISTINCT_RECORDS = 10_000
STAMP = struct.Struct(">Q")  # time.monotonic_ns() at produce(), first bytes of a latency value
QUEUE_MESSAGES_MAX = 100_000  # librdkafka queue.buffering.max.messages, every case
FLUSH_TIMEOUT_S = 60.0
TOPIC_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 15.0  # latency cases: how long to wait for the last records to arrive
FETCH_WAIT_MAX_MS = 100
LATENCY_LINGERS_MS = (5, 0)
LATENCY_PRIME_RECORDS = 10  # sent (stamp 0) and received before a latency case's clock starts
LATENCY_RATES = (1_000, 10_000)
ROUND_SIZES = (100, 1_000)
DEFAULT_SECONDS = 10.0
QUICK_SECONDS = 3.0
WARMUP_S = 5.0  # per warm-up phase and server
QUICK_WARMUP_S = 1.0
GOAL_RATIO = 0.5
GOAL_P99_MS = 20.0

PRODUCER = {
    "acks": "all",
    "enable.idempotence": False,
    "linger.ms": 5,
    # librdkafka's default is 1 000 000 without idempotence; 5 is the Java client's default. Both
    # servers answer a connection's requests one at a time, so requests past the cap would only
    # wait in the socket instead of batching up in the client.
    "max.in.flight.requests.per.connection": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 10_000,
    "compression.type": "none",
    "queue.buffering.max.messages": QUEUE_MESSAGES_MAX,
    "queue.buffering.max.kbytes": 1_048_576,
    "message.timeout.ms": 60_000,
    # Successful deliveries are counted by flush() returning 0 and checked against the high
    # watermark; a Python callback per record would only add client CPU.
    "delivery.report.only.error": True,
}
CONSUMER = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "fetch.min.bytes": 1,
    "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,
    "enable.partition.eof": False,
}

SYSTEMS = ("lakelog", "kafka", "kafka-fsync")
SYSTEM_TITLES = {
    "lakelog": "lakelog",
    "kafka": "Kafka",
    "kafka-fsync": "Kafka flush.messages=1",
}


# ---- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    system: str  # one of SYSTEMS
    case: str  # "rounds-100", "rounds-1000", "batching", "latency-1000", "latency-10000"
    seconds: float  # the timed window (batching: including the final flush)
    records: int  # acknowledged (throughput) or sent (latency) in the window
    cpu_client_s: float
    cpu_server_s: float | None
    cpu_other_s: float
    high_watermark: int | None = None
    received: int | None = None  # latency cases
    latency_ms_p50: float | None = None
    latency_ms_p99: float | None = None
    latency_ms_max: float | None = None
    error: str | None = None  # what failed; the figures are then not comparable

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "records_per_s": round(self.records_per_s, 1)}


def failed(system: str, case: str, error: BaseException) -> Result:
    return Result(system, case, 0.0, 0, 0.0, None, 0.0, error=f"{type(error).__name__}: {error}")


def percentile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


# ---- records ---------------------------------------------------------------------------------


def make_records(seed: int) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs cycled through by every case, the same for every system."""
    rng = random.Random(seed)
    return [
        (f"k{i:0{KEY_BYTES - 1}d}".encode(), rng.randbytes(VALUE_BYTES))
        for i in range(DISTINCT_RECORDS)
    ]


# ---- clients ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where a case sends its records: a server, and the config of the topics it creates."""

    system: str
    bootstrap: str
    pid: int
    topic_config: dict[str, str] = field(default_factory=dict)


class DeliveryErrors:
    """Error delivery reports and client errors of one producer (all successes go unreported)."""

    def __init__(self) -> None:
        self.count = 0
        self.first: str | None = None

    def on_delivery(self, error, message) -> None:
        if error is not None:
            self.count += 1
            self.first = self.first or f"delivery: {error} (offset {message.offset()})"

    def on_error(self, error) -> None:
        log(f"  client error: {error}")
        if error.fatal():
            self.count += 1
            self.first = self.first or f"client: {error}"

    def check(self, context: str) -> None:
        if self.count:
            raise RuntimeError(f"{context}: {self.count} error reports, first: {self.first}")


def new_producer(target: Target, errors: DeliveryErrors, **overrides) -> Producer:
    return Producer(
        {
            "bootstrap.servers": target.bootstrap,
            **PRODUCER,
            **overrides,
            "on_delivery": errors.on_delivery,
            "error_cb": errors.on_error,
        }
    )


def new_consumer(target: Target, topic: str) -> Consumer:
    return Consumer(
        {"bootstrap.servers": target.bootstrap, "group.id": f"bench-{topic}", **CONSUMER}
    )


def create_topic(target: Target, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    new = NewTopic(topic, num_partitions=1, replication_factor=1, config=target.topic_config)
    admin.create_topics([new], operation_timeout=TOPIC_TIMEOUT_S)[topic].result(TOPIC_TIMEOUT_S)
    deadline = time.monotonic() + TOPIC_TIMEOUT_S
    while time.monotonic() < deadline:  # until Metadata names the partition's leader
        topics = admin.list_topics(topic, timeout=TOPIC_TIMEOUT_S).topics
        meta = topics.get(topic)
        if meta and meta.error is None and 0 in meta.partitions:
            if meta.partitions[0].leader >= 0 and meta.partitions[0].error is None:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{target.system}: topic {topic} has no leader after {TOPIC_TIMEOUT_S}s")


def high_watermark(target: Target, topic: str) -> int:
    consumer = new_consumer(target, topic)
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TOPIC_TIMEOUT_S)
    finally:
        consumer.close()
    return high


def flush(producer: Producer, errors: DeliveryErrors, context: str) -> None:
    left = producer.flush(FLUSH_TIMEOUT_S)
    if left:
        raise RuntimeError(f"{context}: {left} records unacknowledged after {FLUSH_TIMEOUT_S}s")
    errors.check(context)


def verify(target: Target, topic: str, acked: int) -> int:
    hw = high_watermark(target, topic)
    if hw != acked:
        raise AssertionError(f"{target.system} {topic}: high watermark {hw} != {acked} acked")
    return hw


# ---- throughput cases ------------------------------------------------------------------------


def bench_rounds(
    target: Target, topic: str, round_records: int, seconds: float, records: list
) -> Result:
    """Rounds of `round_records` produce() calls, each followed by flush()."""
    case = f"rounds-{round_records}"
    create_topic(target, topic)
    errors = DeliveryErrors()
    producer = new_producer(target, errors)
    produce = producer.produce
    cycle = itertools.cycle(records)
    for key, value in itertools.islice(cycle, round_records):  # untimed: metadata, connection
        produce(topic, value, key, 0)
    flush(producer, errors, case)
    acked = round_records
    meter = CpuMeter(target.pid)
    start = time.perf_counter()
    deadline = start + seconds
    now = start
    timed = 0
    while now < deadline:
        for key, value in itertools.islice(cycle, round_records):
            produce(topic, value, key, 0)
        flush(producer, errors, case)
        timed += round_records
        now = time.perf_counter()
    cpu = meter.stop()
    acked += timed
    hw = verify(target, topic, acked)
    return Result(
        target.system,
        case,
        now - start,
        timed,
        cpu["cpu_client_s"],
        cpu["cpu_gateway_s"],
        cpu["cpu_other_s"],
        high_watermark=hw,
    )


def bench_batching(target: Target, topic: str, seconds: float, records: list) -> Result:
    """produce() without pause for `seconds` (poll() when the queue is full), then flush()."""
    create_topic(target, topic)
    errors = DeliveryErrors()
    producer = new_producer(target, errors)
    produce, poll = producer.produce, producer.poll
    produce(topic, records[0][1], records[0][0], 0)  # untimed: metadata, connection
    flush(producer, errors, "batching")
    produced = 0
    meter = CpuMeter(target.pid)
    start = time.perf_counter()
    deadline = start + seconds
    for key, value in itertools.cycle(records):
        if produced % 1000 == 0:
            if time.perf_counter() >= deadline:
                break
            poll(0)
        while True:
            try:
                produce(topic, value, key, 0)
                break
            except BufferError:
                poll(0.001)
        produced += 1
    flush(producer, errors, "batching")
    elapsed = time.perf_counter() - start
    cpu = meter.stop()
    hw = verify(target, topic, produced + 1)
    return Result(
        target.system,
        "batching",
        elapsed,
        produced,
        cpu["cpu_client_s"],
        cpu["cpu_gateway_s"],
        cpu["cpu_other_s"],
        high_watermark=hw,
    )


# ---- produce -> consume latency --------------------------------------------------------------


class _Receiver(threading.Thread):
    """Consumes the partition from offset 0; stamps each record's receive time."""

    def __init__(self, target: Target, topic: str) -> None:
        super().__init__(name=f"consumer-{topic}", daemon=True)
        self.consumer = new_consumer(target, topic)
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.stop = threading.Event()
        self.latencies_ns: list[int] = []
        self.primes = 0  # records stamped 0, sent before the clock started
        self.next_offset = 0
        self.out_of_order = 0
        self.error: str | None = None

    @property
    def received(self) -> int:
        return self.primes + len(self.latencies_ns)

    def run(self) -> None:
        # poll() returns as soon as one record is there; consume(n, timeout) would wait for n
        # records or the whole timeout, so it only takes what is already queued (timeout 0).
        poll, consume, now_ns = self.consumer.poll, self.consumer.consume, time.monotonic_ns
        try:
            while not self.stop.is_set():
                first = poll(0.05)
                if first is None:
                    continue
                self._take(first, now_ns())
                rest = consume(1000, 0)
                received_ns = now_ns()
                for message in rest:
                    self._take(message, received_ns)
        except Exception as error:  # reported by the main thread
            self.error = f"{type(error).__name__}: {error}"
        finally:
            self.consumer.close()

    def _take(self, message, received_ns: int) -> None:
        if message.error() is not None:
            self.error = self.error or str(message.error())
            return
        if message.offset() != self.next_offset:
            self.out_of_order += 1
        self.next_offset = message.offset() + 1
        (sent_ns,) = STAMP.unpack_from(message.value())
        if sent_ns:
            self.latencies_ns.append(received_ns - sent_ns)
        else:
            self.primes += 1


def _wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def latency_case(rate: int, linger_ms: int) -> str:
    return f"latency-{rate}-linger{linger_ms}"


def bench_latency(
    target: Target, topic: str, rate: int, seconds: float, records: list, linger_ms: int
) -> Result:
    """Send `rate` records/s for `seconds`, paced by the clock; latency = receive - produce()."""
    case = latency_case(rate, linger_ms)
    create_topic(target, topic)
    errors = DeliveryErrors()
    producer = new_producer(target, errors, **{"linger.ms": linger_ms})
    receiver = _Receiver(target, topic)
    receiver.start()
    try:
        for key, value in records[:LATENCY_PRIME_RECORDS]:
            producer.produce(topic, STAMP.pack(0) + value[STAMP.size :], key, 0)
        flush(producer, errors, case)
        if not _wait_until(lambda: receiver.primes >= LATENCY_PRIME_RECORDS, TOPIC_TIMEOUT_S):
            raise RuntimeError(f"{case}: the consumer got {receiver.primes} of the first records")
        sent = _send_paced(producer, topic, rate, seconds, records, target.pid)
        flush(producer, errors, case)
        total = LATENCY_PRIME_RECORDS + sent.count
        _wait_until(lambda: receiver.received >= total, DRAIN_TIMEOUT_S)
    finally:
        receiver.stop.set()
        receiver.join()
    if receiver.error:
        raise RuntimeError(f"{case}: consumer error: {receiver.error}")
    if receiver.out_of_order:
        raise AssertionError(f"{case}: {receiver.out_of_order} records out of offset order")
    hw = verify(target, topic, total)
    latencies = sorted(ns / 1e6 for ns in receiver.latencies_ns)
    return Result(
        target.system,
        case,
        sent.seconds,
        sent.count,
        sent.cpu["cpu_client_s"],
        sent.cpu["cpu_gateway_s"],
        sent.cpu["cpu_other_s"],
        high_watermark=hw,
        received=len(latencies),
        latency_ms_p50=percentile(latencies, 50),
        latency_ms_p99=percentile(latencies, 99),
        latency_ms_max=latencies[-1] if latencies else None,
    )


@dataclass(frozen=True)
class _Sent:
    count: int
    seconds: float
    cpu: dict


def _send_paced(
    producer: Producer, topic: str, rate: int, seconds: float, records: list, server_pid: int
) -> _Sent:
    """produce() record i at start + i / rate (a late loop catches up at once), stamped with
    time.monotonic_ns() just before the call. CPU is measured over this window (this process
    includes the consumer thread)."""
    produce, poll, now_ns, pack = producer.produce, producer.poll, time.monotonic_ns, STAMP.pack
    tails = [(key, value[STAMP.size :]) for key, value in records]
    meter = CpuMeter(server_pid)
    start_ns = now_ns()
    end_ns = start_ns + int(seconds * 1e9)
    total = int(seconds * rate)
    sent = 0
    while sent < total:
        due = min(total, (now_ns() - start_ns) * rate // 1_000_000_000 + 1)
        while sent < due:
            key, tail = tails[sent % len(tails)]
            produce(topic, pack(now_ns()) + tail, key, 0)
            sent += 1
        poll(0)
        pause_ns = start_ns + sent * 1_000_000_000 // rate - now_ns()
        if pause_ns > 0:
            time.sleep(pause_ns / 1e9)
    elapsed = max(now_ns(), end_ns) - start_ns
    return _Sent(sent, elapsed / 1e9, meter.stop())


# ---- warm-up and the run ---------------------------------------------------------------------


def warm_up(target: Target, seconds: float, records: list) -> None:
    """Rounds of 100, client batching, then the batching topic read back: discarded."""
    started = time.perf_counter()
    rounds = bench_rounds(target, "warmup-rounds", 100, seconds, records)
    batching = bench_batching(target, "warmup-batching", seconds, records)
    consumer = new_consumer(target, "warmup-batching")
    consumer.assign([TopicPartition("warmup-batching", 0, 0)])
    read, deadline = 0, time.monotonic() + max(seconds, 5.0)
    try:
        while read < batching.high_watermark and time.monotonic() < deadline:
            read += sum(1 for m in consumer.consume(1000, 0.1) if m.error() is None)
    finally:
        consumer.close()
    log(
        f"  warmed up {target.system} in {time.perf_counter() - started:.1f}s: "
        f"{rounds.records + batching.records:,} records produced "
        f"({rounds.records_per_s:,.0f}/s in rounds of 100, {batching.records_per_s:,.0f}/s "
        f"batched), {read:,} read back"
    )


def case_runners(seconds: float, records: list, latency_lingers_ms: list[int]) -> dict:
    """Case name -> function(target, topic) -> Result, in the order they run."""
    runners: dict[str, Callable[[Target, str], Result]] = {}
    for size in ROUND_SIZES:
        runners[f"rounds-{size}"] = lambda t, topic, size=size: bench_rounds(
            t, topic, size, seconds, records
        )
    runners["batching"] = lambda t, topic: bench_batching(t, topic, seconds, records)
    for rate, linger_ms in itertools.product(LATENCY_RATES, latency_lingers_ms):
        runners[latency_case(rate, linger_ms)] = lambda t, topic, r=rate, ms=linger_ms: (
            bench_latency(t, topic, r, seconds, records, ms)
        )
    return runners


def describe(result: Result) -> str:
    if result.error:
        return f"FAILED: {result.error}"
    cpu = f"client CPU {result.cpu_client_s:.1f}s"
    if result.cpu_server_s is not None:
        cpu += f", server CPU {result.cpu_server_s:.1f}s"
    if result.received is not None:
        return (
            f"p50 {result.latency_ms_p50:.2f} ms, p99 {result.latency_ms_p99:.2f} ms, max "
            f"{result.latency_ms_max:.1f} ms; {result.received:,} of {result.records:,} "
            f"received in order; {cpu} (ok)"
        )
    return (
        f"{result.records_per_s:,.0f} records/s ({result.records:,} in {result.seconds:.1f}s); "
        f"{cpu}; HW {result.high_watermark:,} == acked (ok)"
    )


def run_cases(args, seconds: float, warmup_s: float, tmp_root: Path) -> list[Result]:
    records = make_records(args.seed)
    broker: KafkaBroker | None = None
    gateway: GatewayProcess | None = None
    results: list[Result] = []
    try:
        targets: list[Target] = []
        if not args.skip_kafka:
            log(f"starting Kafka {KAFKA_VERSION} (KRaft, broker+controller) ...")
            started = time.perf_counter()
            broker = start_kafka(tmp_root / "kafka")
            log(
                f"  Kafka pid {broker.process.pid} at {broker.bootstrap} "
                f"(ready in {time.perf_counter() - started:.1f}s)"
            )
        log("starting lakelog serve --kafka-port ...")
        started = time.perf_counter()
        gateway = start_gateway(tmp_root / "lakelog" / "data", kafka=True)
        log(
            f"  lakelog pid {gateway.process.pid} at {gateway.kafka_address} "
            f"(ready in {time.perf_counter() - started:.1f}s)"
        )
        targets.append(Target("lakelog", gateway.kafka_address, gateway.process.pid))
        if broker is not None:
            pid = broker.process.pid
            targets.append(Target("kafka", broker.bootstrap, pid))
            targets.append(Target("kafka-fsync", broker.bootstrap, pid, {"flush.messages": "1"}))
        for target in targets[:2]:  # one warm-up per server process
            log(f"warming up {target.system} ({warmup_s:g}s per phase) ...")
            warm_up(target, warmup_s, records)
        for case, runner in case_runners(seconds, records, args.latency_linger_ms).items():
            if args.cases and case not in args.cases.split(","):
                continue
            for target in targets:
                log(f"{case} on {target.system} ...")
                try:
                    result = runner(target, f"{case}-{target.system}")
                except Exception as error:
                    result = failed(target.system, case, error)
                    server_log = gateway.log_text() if target.system == "lakelog" else None
                    if server_log is None and broker is not None:
                        server_log = broker.log_tail()
                    tail = "\n".join((server_log or "").splitlines()[-30:])
                    log(f"  {target.system} server log (last lines):\n{tail}")
                results.append(result)
                log(f"  {describe(result)}")
    finally:
        if gateway is not None:
            gateway.stop()
            log_problems("lakelog", gateway.log_text())
        if broker is not None:
            log("stopping Kafka ...")
            broker.stop()
            log_problems("Kafka", broker.log_tail(10_000))
    return results


def log_problems(server: str, server_log: str, shown: int = 20) -> None:
    """The server log's warnings and errors (the log itself goes with the temp dir)."""
    marks = ("WARN", "ERROR", "Traceback", "Exception")
    lines = [line for line in server_log.splitlines() if any(m in line for m in marks)]
    log(f"{server} log: {len(lines)} warning/error lines" + (":" if lines else ""))
    for line in lines[:shown]:
        log(f"  {line[:300]}")


# ---- report ----------------------------------------------------------------------------------


def find(results: list[Result], system: str, case: str) -> Result | None:
    return next((r for r in results if r.system == system and r.case == case), None)


def _ratio(lakelog: Result | None, kafka: Result | None) -> float | None:
    if lakelog is None or kafka is None or lakelog.error or kafka.error:
        return None
    return lakelog.records_per_s / kafka.records_per_s if kafka.records_per_s else None


def _cell(result: Result | None) -> str:
    if result is None:
        return "-"
    if result.error:
        return "FAILED"
    if result.received is None:
        return f"{result.records_per_s:,.0f}"
    lost = result.records - result.received
    figures = (
        f"{result.latency_ms_p50:.2f} / {result.latency_ms_p99:.2f} / {result.latency_ms_max:.1f}"
    )
    return figures + (f" ({lost:,} missing)" if lost else "")


def summary_table(results: list[Result], cases: list[str]) -> str:
    header = (
        "| case | figure | lakelog | Kafka | Kafka flush.messages=1 | lakelog / Kafka "
        "| lakelog / Kafka flush.messages=1 |"
    )
    lines = [header, "|---|---|---|---|---|---|---|"]
    for case in cases:
        row = {system: find(results, system, case) for system in SYSTEMS}
        latency = case.startswith("latency")
        figure = "p50 / p99 / max ms" if latency else "acked records/s"
        ratios = ["-", "-"]
        if not latency:
            for i, kafka in enumerate(("kafka", "kafka-fsync")):
                ratio = _ratio(row["lakelog"], row[kafka])
                ratios[i] = "-" if ratio is None else f"{ratio:.2f}x"
        cells = " | ".join(_cell(row[system]) for system in SYSTEMS)
        lines.append(f"| {case} | {figure} | {cells} | {ratios[0]} | {ratios[1]} |")
    return "\n".join(lines)


def detail_table(results: list[Result]) -> str:
    header = (
        "| system | case | records | s | records/s | received | client CPU | server CPU "
        "| other CPU | high watermark | error |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|---|"]

    def share(cpu_s: float | None, seconds: float) -> str:
        if cpu_s is None or not seconds:
            return "-"
        return f"{cpu_s:.1f}s ({100 * cpu_s / seconds:.0f}%)"

    for r in results:
        received = "-" if r.received is None else f"{r.received:,}"
        hw = "-" if r.high_watermark is None else f"{r.high_watermark:,}"
        lines.append(
            f"| {r.system} | {r.case} | {r.records:,} | {r.seconds:.1f} | {r.records_per_s:,.0f} "
            f"| {received} | {share(r.cpu_client_s, r.seconds)} "
            f"| {share(r.cpu_server_s, r.seconds)} | {share(r.cpu_other_s, r.seconds)} | {hw} "
            f"| {r.error or ''} |"
        )
    return "\n".join(lines)


def goals(results: list[Result], skip_kafka: bool, lingers_ms: list[int]) -> list[dict]:
    verdicts = []
    for case, title in (("rounds-1000", "rounds of 1 000"), ("batching", "client batching")):
        ratio = _ratio(find(results, "lakelog", case), find(results, "kafka", case))
        verdicts.append(
            {
                "goal": f"{title}: lakelog >= {GOAL_RATIO}x Kafka's throughput",
                "value": None if ratio is None else round(ratio, 3),
                "met": None if ratio is None else ratio >= GOAL_RATIO,
                "why_unknown": "--skip-kafka" if skip_kafka else "not run or failed",
            }
        )
    for linger_ms in lingers_ms:
        latency = find(results, "lakelog", latency_case(LATENCY_RATES[0], linger_ms))
        p99 = None
        if latency is not None and not latency.error and latency.received == latency.records:
            p99 = latency.latency_ms_p99
        verdicts.append(
            {
                "goal": f"lakelog p99 <= {GOAL_P99_MS:g} ms at {LATENCY_RATES[0]:,} records/s "
                f"(linger.ms={linger_ms})",
                "value": p99,
                "met": None if p99 is None else p99 <= GOAL_P99_MS,
                "why_unknown": "not run, failed or lost records",
            }
        )
    return verdicts


def goal_lines(verdicts: list[dict]) -> list[str]:
    lines = []
    for verdict in verdicts:
        if verdict["met"] is None:
            lines.append(f"- {verdict['goal']}: UNKNOWN ({verdict['why_unknown']})")
            continue
        value = verdict["value"]
        shown = f"{value:.2f}x" if "throughput" in verdict["goal"] else f"{value:.2f} ms"
        lines.append(f"- {verdict['goal']}: {shown}: {'MET' if verdict['met'] else 'NOT MET'}")
    return lines


def filesystem_of(path: Path) -> str:
    """The type of the file system holding `path` (longest mount point prefix)."""
    best, fs_type = "", "unknown"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            mount_point, kind = line.split()[1:3]
            inside = str(path).startswith(mount_point.rstrip("/") + "/") or mount_point == "/"
            if inside and len(mount_point) > len(best):
                best, fs_type = mount_point, kind
    except OSError:
        pass
    return f"{fs_type} ({best})"


def java_version() -> str:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = done.stderr.splitlines()
    return lines[0] if lines else "unknown"


# ---- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, help=f"duration of each case (default {DEFAULT_SECONDS:g})"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: {QUICK_SECONDS:g}s per case, {QUICK_WARMUP_S:g}s warm-up phases",
    )
    parser.add_argument("--json", type=Path, help="also write the raw results to this file")
    parser.add_argument("--skip-kafka", action="store_true", help="run lakelog only")
    parser.add_argument(
        "--latency-linger-ms",
        type=int,
        nargs="+",
        default=list(LATENCY_LINGERS_MS),
        help="producer linger.ms values of the latency cases, both sides (default "
        + " ".join(map(str, LATENCY_LINGERS_MS))
        + ")",
    )
    parser.add_argument("--cases", help="comma-separated subset of the cases to run (default: all)")
    parser.add_argument("--tmp-dir", type=Path, help="parent of the temp dir (default: $TMPDIR)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the random values")
    return parser.parse_args(argv)


def _raise_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seconds = args.seconds or (QUICK_SECONDS if args.quick else DEFAULT_SECONDS)
    warmup_s = QUICK_WARMUP_S if args.quick else WARMUP_S
    command = shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    load_before = [round(x, 2) for x in os.getloadavg()]
    tmp_root = Path(tempfile.mkdtemp(prefix="lakelog-kafka-bench-", dir=args.tmp_dir))
    machine = machine_info(tmp_root, ("confluent-kafka",))
    settings = {
        "kafka": "-" if args.skip_kafka else f"Apache Kafka {KAFKA_VERSION} ({java_version()})",
        "librdkafka": confluent_kafka.libversion()[0],
        "producer": PRODUCER,
        "latency_lingers_ms": args.latency_linger_ms,
        "consumer": CONSUMER,
        "storage": filesystem_of(tmp_root),
        "seconds_per_case": seconds,
        "warmup_s_per_phase": warmup_s,
    }
    log(f"command: {command}")
    log(f"machine: {json.dumps(machine)}")
    log(f"settings: {json.dumps(settings)}")
    log(f"{seconds:g}s per case; temp dir {tmp_root}")
    bench_start = time.perf_counter()
    try:
        results = run_cases(args, seconds, warmup_s, tmp_root)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    total_s = time.perf_counter() - bench_start
    ran = {r.case for r in results}
    cases = [case for case in case_runners(seconds, [], args.latency_linger_ms) if case in ran]
    verdicts = goals(results, args.skip_kafka, args.latency_linger_ms)
    load_after = [round(x, 2) for x in os.getloadavg()]

    details = (
        f"{settings['kafka']}, librdkafka {settings['librdkafka']}; storage {settings['storage']}"
    )
    for line in report_header(
        machine,
        command=command,
        code_details=details,
        load_before=load_before,
        load_after=load_after,
    ):
        print(line)
    print(f"producer (both sides): {json.dumps(PRODUCER)}")
    print(
        f"latency cases: linger.ms {args.latency_linger_ms}; consumer: {json.dumps(CONSUMER)}, "
        "assign()ed to partition 0"
    )
    print(f"{seconds:g}s per case, {warmup_s:g}s per warm-up phase; total {total_s:.0f}s")
    print()
    print(summary_table(results, cases))
    print()
    print("Goals:")
    for line in goal_lines(verdicts):
        print(line)
    print()
    print(
        "Per run (CPU: seconds in the window and share of one core; client = this process, "
        "Python and librdkafka threads; other = every other process on the machine):"
    )
    print(detail_table(results))
    if args.json:
        payload = {
            "command": command,
            "machine": machine,
            "settings": settings,
            "total_s": round(total_s, 1),
            "load_before": load_before,
            "load_after": load_after,
            "results": [r.as_dict() for r in results],
            "goals": verdicts,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
