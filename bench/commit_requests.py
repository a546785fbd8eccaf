"""What partitions cost in object-store requests: per MB and per partition-hour, with and without
a topic's `delta.commit.interval.ms`, priced at S3 Standard's public request prices.

Setup: the in-memory S3 endpoint behind the latency proxy of bench/object_store.py (profile
s3-standard: PUT 20 / 60 ms median / p99, GET 15 / 45), one gateway with its Kafka listener on a
bucket of it. One topic per case, its partitions opened first (one record each: the "open N"
rows). A librdkafka producer (acks=all, linger.ms=5, its other defaults) sends 100-byte values
paced by the clock, round-robin over the partitions, for --seconds per case. The proxy counts
every request the node makes, by kind (PUT, GET, HEAD, LIST, DELETE, POST); the node's /metrics
count its commits.

Cases (partitions x records/s per partition, commit interval):
  idle, no partitions   the node alone, before any topic: its liveness and membership requests
  N x r/s iI            N partitions at r records/s each, delta.commit.interval.ms I (CASES;
                        --quick: fewer and shorter)
  idle, all open        every case's partitions open and quiet: what they add to the node's own

Reported per case: commits/s, requests/s by kind, requests per partition-hour and per MB
produced, dollars per month (730 hours; the node's and per partition) at S3 Standard's prices
(PUT/COPY/POST/LIST $0.005 per 1,000, GET/HEAD $0.0004 per 1,000, DELETE free), the node's CPU,
and produce latency (produce() to the delivery report) p50 / p99. librdkafka sends one
partition per produce request (its issue #1700), and the node runs at most 32 of a connection's
requests at once (api/kafka/listener.py IN_FLIGHT_MAX): with a commit interval I, a connection
producing to N partitions then waits about N / 32 x I (Kafka's Java client puts every partition
of a broker in one request: about I).

Usage: .venv/bin/python bench/commit_requests.py [--seconds S] [--quick] [--json PATH]
About 6 minutes (--quick about 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shlex
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from confluent_kafka import Producer

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.commit_cost import node_counters  # noqa: E402
from bench.object_store import (  # noqa: E402
    MEMORY_BACKEND,
    MEMORY_ENV,
    create_topic,
    diff_stats,
    requests_by_kind,
    start_proxy,
)
from bench.produce_fetch import (  # noqa: E402
    CpuMeter,
    log,
    machine_info,
    percentile,
    report_header,
)
from tests.gateway_process import start_gateway  # noqa: E402

PROFILE = "s3-standard"
VALUE_BYTES = 100
HOURS_PER_MONTH = 730
# S3 Standard request prices (us-east-1 list prices), dollars per request.
PRICE_PER_REQUEST = {
    "PUT": 0.005 / 1000,
    "POST": 0.005 / 1000,
    "LIST": 0.005 / 1000,
    "GET": 0.0004 / 1000,
    "HEAD": 0.0004 / 1000,
    "DELETE": 0.0,
}


@dataclass(frozen=True)
class Case:
    partitions: int
    records_per_s_per_partition: float
    interval_ms: int

    @property
    def name(self) -> str:
        rate = f"{self.records_per_s_per_partition:g}"
        return f"{self.partitions}x{rate}/s i{self.interval_ms}"


CASES = (
    Case(1000, 0.1, 0),
    Case(100, 2.0, 0),
    Case(100, 2.0, 1000),
    Case(100, 2.0, 5000),
)
QUICK_CASES = (Case(100, 2.0, 0), Case(100, 2.0, 1000))


@dataclass(frozen=True)
class Outcome:
    case: str
    partitions: int
    seconds: float
    records: int
    commits: float
    requests: dict[str, int]
    cpu_node_s: float
    latency_ms_p50: float | None = None
    latency_ms_p99: float | None = None

    @property
    def requests_total(self) -> int:
        return sum(self.requests.values())

    @property
    def per_partition_hour(self) -> float | None:
        if not self.partitions:
            return None
        return self.requests_total / self.partitions / (self.seconds / 3600)

    @property
    def per_mb(self) -> float | None:
        megabytes = self.records * VALUE_BYTES / 1e6
        return self.requests_total / megabytes if megabytes else None

    @property
    def dollars_per_month(self) -> float:
        """The requests' price over a month at this rate (the whole node)."""
        dollars = sum(PRICE_PER_REQUEST.get(kind, 0.0) * n for kind, n in self.requests.items())
        return dollars / (self.seconds / 3600) * HOURS_PER_MONTH

    @property
    def dollars_per_partition_month(self) -> float | None:
        return self.dollars_per_month / self.partitions if self.partitions else None


# ---- the node ----------------------------------------------------------------------------------


class Sender:
    """A librdkafka producer that notes each record's produce() -> delivery time."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
             "enable.idempotence": False, "message.timeout.ms": 600_000}
        )  # fmt: skip
        self.latencies_ms: list[float] = []
        self.failed = 0

    def send(self, topic: str, partition: int, value: bytes) -> None:
        sent = time.perf_counter()

        def delivered(error, _message) -> None:
            if error is not None:
                self.failed += 1
            else:
                self.latencies_ms.append(1000 * (time.perf_counter() - sent))

        self.producer.produce(topic, value, partition=partition, on_delivery=delivered)

    def flush(self) -> None:
        if self.producer.flush(180):
            raise RuntimeError("records left unacknowledged after 180 s")
        if self.failed:
            raise RuntimeError(f"{self.failed} records failed")


def open_partitions(sender: Sender, topic: str, partitions: int) -> int:
    """One record to each partition: the node takes each (its first produce)."""
    for partition in range(partitions):
        sender.send(topic, partition, b"open")
    sender.flush()
    sender.latencies_ms.clear()
    return partitions


def paced(sender: Sender, topic: str, case: Case, seconds: float) -> int:
    """Records at case's total rate, round-robin over the partitions, for `seconds`."""
    rate = case.partitions * case.records_per_s_per_partition
    total = int(rate * seconds)
    value = os.urandom(VALUE_BYTES)
    start = time.perf_counter()
    for index in range(total):
        pause = start + index / rate - time.perf_counter()
        if pause > 0:
            sender.producer.poll(pause)
        sender.send(topic, index % case.partitions, value)
    sender.flush()
    return total


# ---- the run -----------------------------------------------------------------------------------


def measure(gateway, proxy, name: str, partitions: int, action) -> Outcome:
    before, commits_before = proxy.stats(), node_counters(gateway.url).commits
    meter = CpuMeter(gateway.process.pid)
    started = time.monotonic()
    records = action()
    seconds = time.monotonic() - started
    cpu = meter.stop()
    spent = diff_stats(proxy.stats(), before)
    return Outcome(
        name, partitions, seconds, records, node_counters(gateway.url).commits - commits_before,
        dict(requests_by_kind(spent)), cpu["cpu_gateway_s"] or 0.0,
    )  # fmt: skip


def idle(gateway, proxy, name: str, partitions: int, seconds: float) -> Outcome:
    """A quiet window: the node's own requests (liveness, membership), and what its open
    partitions add to them (compare with no partitions)."""
    outcome = measure(gateway, proxy, name, partitions, lambda: time.sleep(seconds) or 0)
    log(f"{name}: {describe(outcome)}")
    return outcome


def run(args, tmp: Path) -> tuple[list[Outcome], dict[str, float]]:
    proxy = start_proxy(MEMORY_BACKEND, tmp, args.seed)
    gateway = None
    outcomes: list[Outcome] = []
    opened: dict[str, float] = {}
    try:
        proxy.set_profile(PROFILE)
        bucket = f"lake-{random.getrandbits(48):012x}"
        httpx.put(f"{proxy.url}/{bucket}", timeout=10).raise_for_status()
        env = {**MEMORY_ENV, "AWS_ENDPOINT_URL": proxy.url}
        gateway = start_gateway(tmp / "data", env=env, root=f"s3://{bucket}/lakelog", kafka=True)
        sender = Sender(gateway.kafka_address)
        outcomes.append(idle(gateway, proxy, "idle, no partitions", 0, args.seconds))
        cases = QUICK_CASES if args.quick else CASES
        for case in cases:
            topic = f"t{case.partitions}-{case.interval_ms}-{len(outcomes)}"
            interval = {"delta.commit.interval.ms": str(case.interval_ms)}
            create_topic(gateway.url, topic, case.partitions, interval)
            opening = measure(
                gateway, proxy, f"open {case.partitions}", case.partitions,
                lambda c=case, t=topic: open_partitions(sender, t, c.partitions),
            )  # fmt: skip
            opened[case.name] = opening.seconds
            outcomes.append(opening)
            log(f"{case.name}: {case.partitions} partitions open in {opening.seconds:.1f} s; "
                f"{opening.requests_total / case.partitions:.1f} requests each")  # fmt: skip
            sender.latencies_ms.clear()
            outcome = measure(
                gateway, proxy, case.name, case.partitions,
                lambda c=case, t=topic: paced(sender, t, c, args.seconds),
            )  # fmt: skip
            latencies = sorted(sender.latencies_ms)
            outcome = dataclasses.replace(
                outcome,
                latency_ms_p50=percentile(latencies, 50),
                latency_ms_p99=percentile(latencies, 99),
            )
            outcomes.append(outcome)
            log(f"  {describe(outcome)}")
        open_total = sum(c.partitions for c in cases)
        time.sleep(10)  # the last merges and checkpoints of the traffic
        outcomes.append(idle(gateway, proxy, "idle, all open", open_total, args.seconds))
    finally:
        if gateway is not None:
            gateway.stop()
        proxy.stop()
    return outcomes, opened


def describe(o: Outcome) -> str:
    kinds = ", ".join(f"{k} {v / o.seconds:,.1f}/s" for k, v in sorted(o.requests.items()))
    latency = (
        f"; produce p50 {o.latency_ms_p50:.0f} ms, p99 {o.latency_ms_p99:.0f} ms"
        if o.latency_ms_p99 is not None
        else ""
    )
    return (
        f"{o.records:,} records, {o.commits / o.seconds:,.1f} commits/s, requests {kinds or '0'}; "
        f"{_num(o.per_partition_hour, 1)} per partition-hour, "
        f"${o.dollars_per_month:,.2f} per month; node CPU {o.cpu_node_s / o.seconds:.0%}{latency}"
    )


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table(outcomes: list[Outcome]) -> str:
    lines = [
        "| case | records/s | commits/s | requests/s (PUT, GET, LIST, DELETE) | requests per "
        "partition-hour | requests per MB | $ per month (node) | $ per partition-month | node CPU "
        "| produce p50 / p99 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        kinds = ", ".join(f"{o.requests.get(k, 0) / o.seconds:,.1f}"
                          for k in ("PUT", "GET", "LIST", "DELETE"))  # fmt: skip
        per_mb = "-" if o.per_mb is None else f"{o.per_mb:,.0f}"
        latency = "-"
        if o.latency_ms_p99 is not None:
            latency = f"{o.latency_ms_p50:,.0f} / {o.latency_ms_p99:,.0f}"
        lines.append(
            f"| {o.case} | {o.records / o.seconds:,.0f} | {o.commits / o.seconds:,.1f} | {kinds} "
            f"| {_num(o.per_partition_hour, 1)} | {per_mb} | ${o.dollars_per_month:,.2f} "
            f"| {_dollars(o.dollars_per_partition_month)} | {o.cpu_node_s / o.seconds:.0%} "
            f"| {latency} |"
        )
    return "\n".join(lines)


def _dollars(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = min(args.seconds, 15.0)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="commit-requests-") as tmp:
        machine = machine_info(Path(tmp))
        outcomes, opened = run(args, Path(tmp))
    command = "bench/commit_requests.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    header = report_header(
        machine, command=command, load_before=load_before, load_after=os.getloadavg(),
        code_details=f"in-memory S3 behind the latency proxy, profile {PROFILE}",
    )  # fmt: skip
    opens = ", ".join(f"{name}: {seconds:.1f} s" for name, seconds in opened.items())
    print("\n".join([*header, f"partitions opened (first produce to each): {opens}", "",
                     table(outcomes)]))  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
