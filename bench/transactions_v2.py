"""Transactions v2 against v1 (issue 27): Kafka's Java producer (kafka-clients 4.1, unmodified)
committing transactions of 1, 10 and 100 records (100-byte values) for `--seconds` each, on a
fresh one-partition topic per case, against

  lakelog-v2   a lakelog node finalizing transaction.version 2 (KIP-890: Produce v12 adds the
               partition, EndTxn v5 bumps the epoch at every end; the default)
  lakelog-v1   the same with LAKELOG_KAFKA_TRANSACTION_VERSION=1 (AddPartitionsToTxn first)
  kafka        Apache Kafka 4.1.1 (one KRaft node on this machine; transaction.version 2)

in one run, the systems back to back per case. Each run is verified: the partition's high
watermark is the records committed plus one marker per transaction (and the warm-up
transaction's record and marker). Reports records/s and transactions/s, v2/v1, and lakelog-v2
as a multiple of Kafka's.

    .venv/bin/python bench/transactions_v2.py [--sizes 1 10 100] [--seconds 10] [--skip-kafka]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench.transactions import create_topic, high_watermark  # noqa: E402
from tests import apache_kafka  # noqa: E402
from tests.gateway_process import start_gateway  # noqa: E402

JAVA_SOURCE = REPO / "bench" / "java" / "TxnBench.java"
WARMUP_RECORDS = 1


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_case(classes: Path, bootstrap: str, size: int, seconds: float) -> dict:
    topic = create_topic(bootstrap)
    command = apache_kafka.java_command(
        "TxnBench", bootstrap, topic, f"bench-{uuid.uuid4().hex[:8]}", str(size), str(seconds),
        classpath=(classes,),
    )  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 180)
    if done.returncode != 0:
        raise RuntimeError(f"TxnBench failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.splitlines()[-1])
    expected = result["records"] + result["transactions"] + WARMUP_RECORDS + 1
    watermark = high_watermark(bootstrap, topic)
    if watermark != expected:
        raise RuntimeError(f"{topic}: high watermark {watermark}, expected {expected}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--skip-kafka", action="store_true")
    args = parser.parse_args()
    results: dict[tuple[str, int], dict] = {}
    with TemporaryDirectory() as tmp:
        root = Path(tmp)
        classes = apache_kafka.compile_java([JAVA_SOURCE], root / "classes")
        systems = {}
        for version in (2, 1):
            env = {
                "LAKELOG_KAFKA_TRANSACTION_VERSION": str(version),
                "LAKELOG_MAINTENANCE": "false",
            }
            gateway = start_gateway(root / f"lakelog-v{version}" / "data", env=env, kafka=True)
            systems[f"lakelog-v{version}"] = (gateway.kafka_address, gateway.stop)
        if not args.skip_kafka:
            log("starting Apache Kafka ...")
            broker = apache_kafka.start_kafka(root / "kafka")
            systems["kafka"] = (broker.bootstrap, broker.stop)
        try:
            for size in args.sizes:
                for system, (bootstrap, _) in systems.items():
                    log(f"{system}: transactions of {size} record(s) for {args.seconds:g}s")
                    results[(system, size)] = run_case(classes, bootstrap, size, args.seconds)
        finally:
            for _, stop in systems.values():
                stop()
    report(results, args)
    return 0


def report(results: dict[tuple[str, int], dict], args) -> None:
    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}")
    print(f"command: .venv/bin/python bench/transactions_v2.py --seconds {args.seconds:g}")
    print("| records/txn | system | txns/s | records/s | v2/v1 | vs kafka | epoch after |")
    print("|---|---|---|---|---|---|---|")
    for (system, size), result in results.items():
        rate = result["records"] / result["seconds"]
        txns = result["transactions"] / result["seconds"]
        v1 = results.get(("lakelog-v1", size))
        kafka = results.get(("kafka", size))
        ratio = ""
        if system == "lakelog-v2" and v1:
            ratio = f"{rate / (v1['records'] / v1['seconds']):.2f}x"
        versus = ""
        if system.startswith("lakelog") and kafka:
            versus = f"{rate / (kafka['records'] / kafka['seconds']):.2f}x"
        print(f"| {size} | {system} | {txns:,.0f} | {rate:,.0f} | {ratio} | {versus} | "
              f"{result['epoch']} |")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
