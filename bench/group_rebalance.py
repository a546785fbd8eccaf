"""Group rebalances (issue 27): a group of 8 of Kafka's Java consumers (kafka-clients 4.1,
unmodified) on a 16-partition topic, timed from a member joining (or leaving) until every
member holds its balanced share again, `--rounds` times each, with

  classic    group.protocol=classic (JoinGroup/SyncGroup; the Java default assignors: eager range)
  consumer   group.protocol=consumer (KIP-848; the coordinator's uniform assignor)

against a lakelog node and Apache Kafka 4.1.1 (one KRaft node) in one run, each with its
defaults (heartbeats every 3 s for classic members, the coordinator's 5 s for KIP-848 members:
most of each time is waiting for heartbeats, as a user's group does), or with `--heartbeat-ms`
for both (the classic members' heartbeat.interval.ms and the coordinators' KIP-848 interval,
lakelog's LAKELOG_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS and Kafka's
group.consumer.heartbeat.interval.ms). Members learn their
partitions from their own rebalance callbacks; the run fails if a partition is ever held by two
members at once. Reports the median and worst time and lakelog as a multiple of Kafka's.

    .venv/bin/python bench/group_rebalance.py [--rounds 3] [--members 8] [--partitions 16]
        [--heartbeat-ms 500]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory

from confluent_kafka.admin import AdminClient, NewTopic

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests import apache_kafka  # noqa: E402
from tests.gateway_process import start_gateway  # noqa: E402

JAVA_SOURCE = REPO / "bench" / "java" / "RebalanceBench.java"
PROTOCOLS = ("classic", "consumer")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def create_topic(bootstrap: str, partitions: int) -> str:
    name = f"rebalance-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def run_case(classes: Path, bootstrap: str, protocol: str, args) -> dict:
    topic = create_topic(bootstrap, args.partitions)
    group = f"{topic}-{protocol}"
    extra = []
    if args.heartbeat_ms and protocol == "classic":
        extra.append(f"heartbeat.interval.ms={args.heartbeat_ms}")
    command = apache_kafka.java_command(
        "RebalanceBench", bootstrap, topic, group, protocol, str(args.members), str(args.rounds),
        *extra, classpath=(classes,),
    )  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"RebalanceBench failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.splitlines()[-1])
    if result["overlaps"]:
        raise RuntimeError(f"{protocol}: a partition was held by two members at once")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--heartbeat-ms", type=int, default=None)
    parser.add_argument("--skip-kafka", action="store_true")
    args = parser.parse_args()
    results: dict[tuple[str, str], dict] = {}
    with TemporaryDirectory() as tmp:
        root = Path(tmp)
        classes = apache_kafka.compile_java([JAVA_SOURCE], root / "classes")
        env, kafka_config = {"LAKELOG_MAINTENANCE": "false"}, {}
        if args.heartbeat_ms:
            env["LAKELOG_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS"] = str(args.heartbeat_ms)
            kafka_config = {
                "group.consumer.heartbeat.interval.ms": str(args.heartbeat_ms),
                "group.consumer.min.heartbeat.interval.ms": str(args.heartbeat_ms),
            }
        gateway = start_gateway(root / "lakelog" / "data", env=env, kafka=True)
        systems = {"lakelog": (gateway.kafka_address, gateway.stop)}
        if not args.skip_kafka:
            log("starting Apache Kafka ...")
            broker = apache_kafka.start_kafka(root / "kafka", extra=kafka_config)
            systems["kafka"] = (broker.bootstrap, broker.stop)
        try:
            for protocol in PROTOCOLS:
                for system, (bootstrap, _) in systems.items():
                    log(f"{system}: {protocol} group of {args.members}, {args.rounds} rounds")
                    results[(system, protocol)] = run_case(classes, bootstrap, protocol, args)
        finally:
            for _, stop in systems.values():
                stop()
    report(results, args)
    return 0


def report(results: dict[tuple[str, str], dict], args) -> None:
    print(f"machine: {platform.platform()}, {platform.processor() or platform.machine()}")
    heartbeat = f" --heartbeat-ms {args.heartbeat_ms}" if args.heartbeat_ms else ""
    print(
        f"command: .venv/bin/python bench/group_rebalance.py --rounds {args.rounds} "
        f"--members {args.members} --partitions {args.partitions}{heartbeat}"
    )
    print("| protocol | system | join: median (worst) ms | leave: median (worst) ms | vs kafka |")
    print("|---|---|---|---|---|")
    for (system, protocol), result in results.items():
        join, leave = result["join_ms"], result["leave_ms"]
        kafka = results.get(("kafka", protocol))
        versus = ""
        if system != "kafka" and kafka:
            join_ratio = statistics.median(join) / statistics.median(kafka["join_ms"])
            leave_ratio = statistics.median(leave) / statistics.median(kafka["leave_ms"])
            versus = f"join {join_ratio:.2f}x, leave {leave_ratio:.2f}x"
        print(
            f"| {protocol} | {system} | {statistics.median(join):,.0f} ({max(join):,}) | "
            f"{statistics.median(leave):,.0f} ({max(leave):,}) | {versus} |"
        )


if __name__ == "__main__":
    sys.exit(main())
