"""Transactional against idempotent produce throughput over lakelog's Kafka listener (issue 16).

For each transaction size N the bench runs, for `--seconds` each and on a fresh one-partition
topic of a lakelog gateway it starts itself (`lakelog serve --kafka-port`):
  idempotent     rounds of N records acknowledged before the next (enable.idempotence, flush)
  transactional  transactions of N records: begin, produce N, commit (confluent-kafka's
                 transactional producer; each commit stores the coordinator's state twice and
                 writes one marker)
and reports records/s of both and their ratio (the cost of the transaction). With `--kafka`
the same cases run against Apache Kafka (one KRaft broker on this machine, bench/kafka_compare.py
starts it) with the same client and records, and lakelog's transactional rate is given as a
multiple of Kafka's. Every run is verified: the partition's high watermark is the records
acknowledged plus one marker per committed transaction.

    .venv/bin/python bench/transactions.py [--sizes 1 10 100 1000] [--seconds 5] [--kafka]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.apache_kafka import start_kafka  # noqa: E402
from tests.gateway_process import start_gateway  # noqa: E402

VALUE = b"x" * 100


@dataclass(frozen=True, slots=True)
class Run:
    mode: str
    size: int
    records: int
    transactions: int
    seconds: float
    high_watermark: int

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def create_topic(bootstrap: str) -> str:
    name = f"txn-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    return name


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-bench-watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    finally:
        consumer.close()


def run_idempotent(bootstrap: str, size: int, seconds: float) -> Run:
    topic = create_topic(bootstrap)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    records, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(size):
            producer.produce(topic, VALUE, partition=0)
        if producer.flush(60) != 0:
            raise RuntimeError("records left undelivered")
        records += size
    elapsed = time.perf_counter() - started
    return Run("idempotent", size, records, 0, elapsed, high_watermark(bootstrap, topic))


def run_transactional(bootstrap: str, size: int, seconds: float) -> Run:
    topic = create_topic(bootstrap)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(60)
    records = transactions = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        producer.begin_transaction()
        for _ in range(size):
            producer.produce(topic, VALUE, partition=0)
        producer.commit_transaction(60)
        records += size
        transactions += 1
    elapsed = time.perf_counter() - started
    watermark = high_watermark(bootstrap, topic)
    return Run("transactional", size, records, transactions, elapsed, watermark)


def verified(run: Run) -> str:
    expected = run.records + run.transactions  # one marker per committed transaction
    return "ok" if run.high_watermark == expected else f"MISMATCH (expected {expected})"


def run_cases(system: str, bootstrap: str, sizes, seconds: float) -> dict[int, tuple[Run, Run]]:
    """(idempotent, transactional) per transaction size, each verified (log lines)."""
    runs = {}
    log(f"{system} at {bootstrap}; {seconds:g}s per case")
    for size in sizes:
        idempotent = run_idempotent(bootstrap, size, seconds)
        log(
            f"  idempotent    N={size}: {idempotent.records_per_s:,.0f} records/s "
            f"({verified(idempotent)})"
        )
        transactional = run_transactional(bootstrap, size, seconds)
        log(
            f"  transactional N={size}: {transactional.records_per_s:,.0f} records/s, "
            f"{transactional.transactions / transactional.seconds:,.1f} transactions/s "
            f"({verified(transactional)})"
        )
        runs[size] = (idempotent, transactional)
    return runs


def failures_of(runs: dict[int, tuple[Run, Run]]) -> int:
    return sum("ok" not in verified(run) for pair in runs.values() for run in pair)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--seconds", type=float, default=5.0, help="per case (default 5)")
    parser.add_argument("--kafka", action="store_true", help="also run against Apache Kafka")
    args = parser.parse_args(argv)
    log(f"command: {' '.join(sys.argv)}")
    log(
        f"machine: {os.cpu_count()} CPUs, {platform.platform()}, python {platform.python_version()}"
    )
    kafka_runs: dict[int, tuple[Run, Run]] = {}
    with TemporaryDirectory(prefix="lakelog-txn-bench-") as tmp:
        gateway = start_gateway(Path(tmp) / "data", kafka=True)
        try:
            runs = run_cases("lakelog", gateway.kafka_address, args.sizes, args.seconds)
        finally:
            gateway.stop()
        if args.kafka:
            broker = start_kafka(Path(tmp) / "kafka")
            try:
                kafka_runs = run_cases("Apache Kafka", broker.bootstrap, args.sizes, args.seconds)
            finally:
                broker.stop()
    print_table(runs, kafka_runs)
    return 1 if failures_of(runs) + failures_of(kafka_runs) else 0


def print_table(runs: dict[int, tuple[Run, Run]], kafka_runs: dict[int, tuple[Run, Run]]) -> None:
    print()
    header = (
        "| records per transaction | idempotent records/s | transactional records/s | "
        "transactions/s | transactional / idempotent |"
    )
    rule = "|---|---|---|---|---|"
    if kafka_runs:
        header += (
            " Kafka transactional records/s | Kafka transactional / idempotent |"
            " lakelog / Kafka (transactional) |"
        )
        rule += "---|---|---|"
    print(header)
    print(rule)
    for size, (idempotent, transactional) in runs.items():
        ratio = transactional.records_per_s / idempotent.records_per_s
        row = (
            f"| {size:,} | {idempotent.records_per_s:,.0f} | {transactional.records_per_s:,.0f} | "
            f"{transactional.transactions / transactional.seconds:,.1f} | {ratio:.2f}x |"
        )
        if size in kafka_runs:
            kafka_idempotent, kafka_transactional = kafka_runs[size]
            kafka_ratio = kafka_transactional.records_per_s / kafka_idempotent.records_per_s
            versus = transactional.records_per_s / kafka_transactional.records_per_s
            row += (
                f" {kafka_transactional.records_per_s:,.0f} | {kafka_ratio:.2f}x | {versus:.2f}x |"
            )
        print(row)


if __name__ == "__main__":
    sys.exit(main())
