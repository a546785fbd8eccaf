"""Transactional against idempotent produce throughput over lakelog's Kafka listener (issue 16).

For each transaction size N the bench runs, for `--seconds` each and on a fresh one-partition
topic of a lakelog gateway it starts itself (`lakelog serve --kafka-port`):
  idempotent     rounds of N records acknowledged before the next (enable.idempotence, flush)
  transactional  transactions of N records: begin, produce N, commit (confluent-kafka's
                 transactional producer; each commit stores the coordinator's state twice and
                 writes one marker)
and reports records/s of both and their ratio (the cost of the transaction). Every run is
verified: the partition's high watermark is the records acknowledged plus one marker per
committed transaction.

    .venv/bin/python bench/transactions.py [--sizes 1 10 100 1000] [--seconds 5]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--seconds", type=float, default=5.0, help="per case (default 5)")
    args = parser.parse_args(argv)
    log(f"command: {' '.join(sys.argv)}")
    log(
        f"machine: {os.cpu_count()} CPUs, {platform.platform()}, python {platform.python_version()}"
    )
    rows, failures = [], 0
    with TemporaryDirectory(prefix="lakelog-txn-bench-") as tmp:
        gateway = start_gateway(Path(tmp) / "data", kafka=True)
        try:
            bootstrap = gateway.kafka_address
            log(f"lakelog gateway at {bootstrap}; {args.seconds:g}s per case")
            for size in args.sizes:
                idempotent = run_idempotent(bootstrap, size, args.seconds)
                log(
                    f"  idempotent    N={size}: {idempotent.records_per_s:,.0f} records/s "
                    f"({verified(idempotent)})"
                )
                transactional = run_transactional(bootstrap, size, args.seconds)
                log(
                    f"  transactional N={size}: {transactional.records_per_s:,.0f} records/s, "
                    f"{transactional.transactions / transactional.seconds:,.1f} transactions/s "
                    f"({verified(transactional)})"
                )
                failures += "ok" not in (verified(idempotent), verified(transactional))
                rows.append((size, idempotent, transactional))
        finally:
            gateway.stop()
    print()
    print(
        "| records per transaction | idempotent records/s | transactional records/s | "
        "transactions/s | transactional / idempotent |"
    )
    print("|---|---|---|---|---|")
    for size, idempotent, transactional in rows:
        ratio = transactional.records_per_s / idempotent.records_per_s
        print(
            f"| {size:,} | {idempotent.records_per_s:,.0f} | {transactional.records_per_s:,.0f} | "
            f"{transactional.transactions / transactional.seconds:,.1f} | {ratio:.2f}x |"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
