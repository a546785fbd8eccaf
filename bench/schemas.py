"""Schemas and typed topics, measured in one run against one `lakelog serve --kafka-port`
(scheduled maintenance off, tables on the temp dir's disk):

  produce     Kafka-protocol produce (confluent-kafka, acks=all, linger.ms=5, rounds of
              ROUND_RECORDS records then flush) of Avro records in Confluent's wire format,
              decoded by the leader into typed columns, against the same bytes with the magic
              byte changed (not the wire format: stored untyped, the baseline). Rounds alternate
              typed/untyped on fresh topics; records/s, node CPU ms per 1 000 records, and the
              median ratio typed/untyped.
  spark       a Spark SQL aggregate over one typed field (`value_fields.amount` grouped by
              `value_fields.currency`, on format("delta")) against the same aggregate with
              `from_avro` over the raw values (spark-avro, the 5-byte prefix cut off): median of
              RUNS_SPARK runs each, after one warm-up.
  registry    registry lookups with the client's cache off (plain HTTP, one connection):
              GET /schemas/ids/{id} and POST /subjects/{s} (lookup), requests/s.

Usage: .venv/bin/python bench/schemas.py [--seconds S] [--records N] [--cases C,C]
Progress goes to stderr, results to stdout (and --json PATH).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fastavro
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.gateway_process import free_port  # noqa: E402

ROUND_RECORDS = 1_000
RUNS_SPARK = 5
SCHEMA = {
    "type": "record",
    "name": "Payment",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
        {
            "name": "currency",
            "type": {"type": "enum", "name": "Currency", "symbols": ["EUR", "USD", "GBP"]},
        },
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Node:
    """`lakelog serve` with the Kafka listener, in a temp dir."""

    def __init__(self, data_dir: Path) -> None:
        self.port, kafka_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.bootstrap = f"127.0.0.1:{kafka_port}"
        self.data_dir = data_dir
        command = [
            sys.executable,
            "-m",
            "api.cli",
            "serve",
            "--data-dir",
            str(data_dir),
            "--port",
            str(self.port),
            "--kafka-port",
            str(kafka_port),
            "--no-maintenance",
        ]
        self.process = subprocess.Popen(
            command,
            cwd=Path(__file__).resolve().parents[1],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.process.kill()
        raise RuntimeError("lakelog serve did not start")

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def payloads(schema_id: int, count: int) -> list[bytes]:
    parsed = fastavro.parse_schema(SCHEMA)
    out = []
    for n in range(count):
        buffer = io.BytesIO()
        record = {
            "id": n,
            "customer": f"customer-{n % 997}",
            "amount": (n % 1000) / 10,
            "currency": ("EUR", "USD", "GBP")[n % 3],
            "at": 1_700_000_000_000 + n,
            "note": None if n % 2 else "note",
        }
        fastavro.schemaless_writer(buffer, parsed, record)
        out.append(b"\x00" + schema_id.to_bytes(4, "big") + buffer.getvalue())
    return out


def create_topic(node: Node, name: str) -> None:
    body = {"topic_name": name, "partitions_count": 1}
    answer = httpx.post(f"{node.url}/v3/clusters/lakelog/topics", json=body, timeout=30)
    answer.raise_for_status()


def register(node: Node, subject: str) -> int:
    body = {"schema": json.dumps(SCHEMA)}
    answer = httpx.post(f"{node.url}/subjects/{subject}/versions", json=body, timeout=30)
    answer.raise_for_status()
    return answer.json()["id"]


def produce_rounds(node: Node, topic: str, values: list[bytes], seconds: float) -> dict:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": node.bootstrap,
            "linger.ms": 5,
            "acks": "all",
            "enable.idempotence": False,
            "batch.size": 1_000_000,
            "max.in.flight.requests.per.connection": 5,
        }
    )
    errors: list = []

    def report(error, _message):
        if error is not None:
            errors.append(error)

    sent, index = 0, 0
    cpu_before, started = node.cpu_s(), time.monotonic()
    while time.monotonic() - started < seconds:
        for _ in range(ROUND_RECORDS):
            producer.produce(topic, value=values[index % len(values)], on_delivery=report)
            index += 1
        if producer.flush(60) != 0:
            raise RuntimeError("records left unsent")
        sent += ROUND_RECORDS
    elapsed = time.monotonic() - started
    cpu = node.cpu_s() - cpu_before
    if errors:
        raise RuntimeError(f"delivery errors: {errors[:3]}")
    return {"records_per_s": sent / elapsed, "cpu_ms_per_1000": 1000 * cpu / sent * 1000}


def bench_produce(node: Node, seconds: float, rounds: int) -> dict:
    schema_id = register(node, "bench-typed-value")
    typed = payloads(schema_id, 5_000)
    untyped = [b"\x01" + value[1:] for value in typed]  # same bytes, not the wire format
    create_topic(node, "bench-warmup")
    produce_rounds(node, "bench-warmup", untyped, min(seconds, 5))
    results: dict[str, list[dict]] = {"typed": [], "untyped": []}
    for number in range(rounds):
        order = ("typed", "untyped") if number % 2 == 0 else ("untyped", "typed")
        for kind in order:
            topic = f"bench-{kind}-{number}"
            create_topic(node, topic)
            register(node, f"{topic}-value")  # the topic's subject: its ids are typed there
            values = typed if kind == "typed" else untyped
            result = produce_rounds(node, topic, values, seconds)
            log(
                f"produce round {number + 1}/{rounds} {kind}: "
                f"{result['records_per_s']:,.0f} records/s, "
                f"{result['cpu_ms_per_1000']:.1f} node CPU ms per 1 000 records"
            )
            results[kind].append(result)
    ratios = [
        t["records_per_s"] / u["records_per_s"]
        for t, u in zip(results["typed"], results["untyped"], strict=True)
    ]
    typed_table = Path(node.data_dir) / "topics" / "bench-typed-0" / "0"
    from deltalake import DeltaTable

    row = DeltaTable(str(typed_table)).to_pyarrow_table(columns=["value_fields"]).slice(0, 1)
    assert row.column("value_fields")[0].as_py()["customer"] == "customer-0", "not typed"
    return {
        "typed_records_per_s": statistics.median(r["records_per_s"] for r in results["typed"]),
        "untyped_records_per_s": statistics.median(r["records_per_s"] for r in results["untyped"]),
        "typed_cpu_ms_per_1000": statistics.median(r["cpu_ms_per_1000"] for r in results["typed"]),
        "untyped_cpu_ms_per_1000": statistics.median(
            r["cpu_ms_per_1000"] for r in results["untyped"]
        ),
        "ratio_median": statistics.median(ratios),
        "ratios": ratios,
    }


def bench_spark(node: Node, records: int) -> dict:
    import pyspark
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    schema_id = register(node, "bench-spark-value")
    create_topic(node, "bench-spark")
    log(f"spark: producing {records:,} typed records")
    values = payloads(schema_id, 20_000)
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": node.bootstrap, "linger.ms": 20, "batch.size": 1_000_000}
    )
    for n in range(records):
        while True:
            try:
                producer.produce("bench-spark", value=values[n % len(values)])
                break
            except BufferError:  # the client's queue is full: let deliveries drain it
                producer.poll(0.05)
    assert producer.flush(120) == 0
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("bench-schemas")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
    )
    avro_package = f"org.apache.spark:spark-avro_2.13:{pyspark.__version__}"
    spark = configure_spark_with_delta_pip(builder, extra_packages=[avro_package]).getOrCreate()
    path = str(Path(node.data_dir) / "topics" / "bench-spark" / "0")

    # A new DataFrame for every run: actions on one DataFrame reuse its shuffle files, which
    # would time only the final stage.
    def typed():
        table = spark.read.format("delta").load(path)
        return table.groupBy("value_fields.currency").agg(F.sum("value_fields.amount"))

    def raw():
        table = spark.read.format("delta").load(path)
        payload = F.expr("substring(value, 6, length(value) - 5)")
        decoded = table.select(from_avro(payload, json.dumps(SCHEMA)).alias("v"))
        return decoded.groupBy("v.currency").agg(F.sum("v.amount"))

    def timed(build) -> float:
        started = time.monotonic()
        rows = build().collect()
        assert len(rows) == 3
        return time.monotonic() - started

    timings: dict[str, list[float]] = {"typed": [], "from_avro": []}
    for frame in (typed, raw):
        timed(frame)  # warm-up
    for number in range(RUNS_SPARK):
        for kind, frame in (("typed", typed), ("from_avro", raw))[:: 1 if number % 2 else -1]:
            timings[kind].append(timed(frame))
            log(f"spark run {number + 1}/{RUNS_SPARK} {kind}: {timings[kind][-1]:.2f} s")
    typed_sums = sorted(tuple(r) for r in typed().collect())
    raw_sums = sorted(tuple(r) for r in raw().collect())
    assert [(c, round(s, 3)) for c, s in typed_sums] == [(c, round(s, 3)) for c, s in raw_sums]
    spark.stop()
    return {
        "records": records,
        "typed_s": statistics.median(timings["typed"]),
        "from_avro_s": statistics.median(timings["from_avro"]),
        "speedup": statistics.median(timings["from_avro"]) / statistics.median(timings["typed"]),
    }


def bench_registry(node: Node, seconds: float) -> dict:
    schema_id = register(node, "bench-lookup-value")
    body = json.dumps({"schema": json.dumps(SCHEMA)})
    rates = {}
    with httpx.Client(base_url=node.url, timeout=30) as client:
        for name, call in (
            ("get_by_id", lambda: client.get(f"/schemas/ids/{schema_id}")),
            (
                "lookup",
                lambda: client.post(
                    "/subjects/bench-lookup-value",
                    content=body,
                    headers={"Content-Type": "application/json"},
                ),
            ),
        ):
            count, started = 0, time.monotonic()
            while time.monotonic() - started < seconds:
                answer = call()
                assert answer.status_code == 200, answer.text
                count += 1
            rates[name] = count / (time.monotonic() - started)
            log(f"registry {name}: {rates[name]:,.0f} requests/s")
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--records", type=int, default=500_000, help="records of the Spark case")
    parser.add_argument("--cases", default="produce,spark,registry")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cases = args.cases.split(",")
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-schemas-") as scratch:
        node = Node(Path(scratch) / "data")
        try:
            if "registry" in cases:
                results["registry"] = bench_registry(node, args.seconds)
            if "produce" in cases:
                results["produce"] = bench_produce(node, args.seconds, args.rounds)
            if "spark" in cases:
                results["spark"] = bench_spark(node, args.records)
        finally:
            node.stop()
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
