"""Share groups (issue 28): records per second acknowledged by 1, 4 and 16 consumers of a
2-partition topic, each record costing `--work-ms` of processing, with

  share      KafkaShareConsumers of one share group (KIP-932: records acquired one by one, so
             every consumer works, whatever the partition count)
  classic    KafkaConsumers of one consumer group (a partition per member: at most 2 busy)

(Kafka 4.2's Java clients, unmodified, bench/java_share/QueueBench.java) against a lakelog node
and Apache Kafka 4.1.1 (one KRaft node, share.version=1) in one run. Each case reads
`--records` records produced beforehand from the start of its own topic, and fails if a record
is settled twice. Reports records per second and lakelog as a multiple of Kafka's.

    .venv/bin/python bench/share_groups.py [--records 4000] [--work-ms 2] [--consumers 1,4,16]
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

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests import apache_kafka  # noqa: E402
from tests.gateway_process import start_gateway  # noqa: E402

JAVA_SOURCE = REPO / "bench" / "java_share" / "QueueBench.java"
MODES = ("share", "classic")
PARTITIONS = 2


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def prepared_topic(bootstrap: str, records: int) -> str:
    name = f"queue-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for index in range(records):
        producer.produce(name, value=f"job-{index}".encode() * 10)
    producer.flush(60)
    return name


def earliest(bootstrap: str, group: str) -> None:
    """share.auto.offset.reset=earliest for the group (Kafka's GROUP config resource)."""
    entity = ("--entity-type", "groups", "--entity-name", group)
    change = ("--alter", "--add-config", "share.auto.offset.reset=earliest")
    done = apache_kafka.tool("kafka-configs", "--bootstrap-server", bootstrap, *entity, *change)
    if done.returncode != 0:
        raise RuntimeError(f"kafka-configs failed:\n{done.stdout}\n{done.stderr[-2000:]}")


def enable_share_groups(bootstrap: str) -> None:
    """Kafka 4.1's share groups are off until the share.version feature is raised."""
    done = apache_kafka.tool(
        "kafka-features", "--bootstrap-server", bootstrap, "upgrade", "--feature", "share.version=1"
    )
    if done.returncode != 0:
        raise RuntimeError(f"kafka-features failed:\n{done.stdout}\n{done.stderr[-2000:]}")


def run_case(classes: Path, bootstrap: str, mode: str, consumers: int, args) -> dict:
    topic = prepared_topic(bootstrap, args.records)
    group = f"{topic}-{mode}"
    if mode == "share":
        earliest(bootstrap, group)
    command = apache_kafka.java_command(
        "QueueBench", bootstrap, topic, group, mode, str(consumers), str(args.records),
        str(args.work_ms), str(args.timeout_s),
        classpath=(classes,), libs=apache_kafka.share_client_jars(),
    )  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout_s + 120)
    if done.returncode != 0:
        raise RuntimeError(f"QueueBench failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.splitlines()[-1])
    if result["settled"] < args.records:
        raise RuntimeError(f"{mode}/{consumers}: only {result['settled']} records settled")
    if mode == "share" and result["duplicates"]:
        raise RuntimeError(f"share/{consumers}: {result['duplicates']} records settled twice")
    result["rate"] = result["settled"] / max(result["seconds"], 1e-9)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--work-ms", type=int, default=2)
    parser.add_argument("--consumers", default="1,4,16")
    parser.add_argument("--timeout-s", type=int, default=600)
    parser.add_argument("--skip-kafka", action="store_true")
    args = parser.parse_args()
    counts = [int(c) for c in args.consumers.split(",")]
    results: dict[tuple[str, str, int], dict] = {}
    with TemporaryDirectory() as tmp:
        root = Path(tmp)
        libs = apache_kafka.share_client_jars()
        classes = apache_kafka.compile_java([JAVA_SOURCE], root / "classes", libs)
        gateway = start_gateway(root / "lakelog" / "data", env={"LAKELOG_MAINTENANCE": "false"},
                                kafka=True)  # fmt: skip
        systems = {"lakelog": (gateway.kafka_address, gateway.stop)}
        if not args.skip_kafka:
            log("starting Apache Kafka ...")
            broker = apache_kafka.start_kafka(root / "kafka")
            enable_share_groups(broker.bootstrap)
            systems["kafka"] = (broker.bootstrap, broker.stop)
        try:
            for mode in MODES:
                for consumers in counts:
                    for system, (bootstrap, _) in systems.items():
                        log(f"{system}: {mode} group of {consumers}")
                        case = run_case(classes, bootstrap, mode, consumers, args)
                        results[(system, mode, consumers)] = case
                        log(f"  {case['rate']:,.0f} records/s")
        finally:
            for _, stop in systems.values():
                stop()
    report(results, args)
    return 0


def report(results: dict[tuple[str, str, int], dict], args) -> None:
    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}")
    print(
        f"command: .venv/bin/python bench/share_groups.py --records {args.records} "
        f"--work-ms {args.work_ms} --consumers {args.consumers}"
    )
    print("| group | consumers | system | records/s | vs kafka | vs classic, same system |")
    print("|---|---|---|---|---|---|")
    for (system, mode, consumers), result in results.items():
        kafka = results.get(("kafka", mode, consumers))
        classic = results.get((system, "classic", consumers))
        versus = f"{result['rate'] / kafka['rate']:.2f}x" if kafka and system != "kafka" else ""
        gain = f"{result['rate'] / classic['rate']:.2f}x" if classic and mode == "share" else ""
        print(f"| {mode} | {consumers} | {system} | {result['rate']:,.0f} | {versus} | {gain} |")


if __name__ == "__main__":
    sys.exit(main())
