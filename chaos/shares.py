"""SQ: a share group (KIP-932, a queue) under faults.

Share consumers over Kafka's protocol (Kafka 4.2's KafkaShareConsumer, unmodified,
chaos/java_share/ChaosShareConsumer.java, one process each) and over HTTP (threads here, each
acquisition through a random node, some records released or left to their lock's expiry)
consume one topic in one share group, while a feeder writes the input and the nemesis kills
node 0 (`kill -9`, then a restart) and pauses nodes past their leases. Every consumer rejects
records whose value ends in 7 and accepts the others. The group's dead letter topic receives
what is archived after delivery.

Each consumer logs every delivery (record, delivery count) and every acknowledgement's outcome
as its client learned it: confirmed, refused (INVALID_RECORD_STATE, 409 40920), or unknown (the
answer was lost, or an error such as a disconnect or a 503 that does not say whether the leader
stored it before it died). The checker
(`check_queue`) then proves:

- never accepted twice: no record has two confirmed acceptances;
- nothing lost: every acknowledged input record ends settled, accepted (confirmed, or by an
  acknowledgement whose answer was lost) or in the dead letter topic with its reason;
- delivery counts only grow: no record is delivered twice with the same delivery count, and
  none past the group's delivery limit;
- drained: at the end the group's share partitions start at the partitions' ends.
"""

from __future__ import annotations

import base64
import random
import subprocess
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from confluent_kafka import Producer

from chaos.history import Recorder
from chaos.transactions import alternate_faults
from tests import apache_kafka
from tests.gateway_process import free_port

GROUP = "sq-workers"
DELIVERY_LIMIT = 4
HTTP_LOCK_MS = 3_000
JAVA_SOURCES = Path(__file__).parent / "java_share"
SHARE = "/v3/clusters/lakelog/share-groups"
CHECKS = ("accepted_twice", "lost", "repeated_counts", "past_limit", "undrained")


@dataclass
class QueueLog:
    """What the consumers observed, from every thread and process."""

    inputs: dict[str, None] = field(default_factory=dict)  # acknowledged input values
    # (partition, offset) -> [(delivery count, value)]
    deliveries: dict[tuple[int, int], list[tuple[int, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # (partition, offset) -> [(accept|reject, ok|failed|unknown)]
    acknowledgements: dict[tuple[int, int], list[tuple[str, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    dead_letters: dict[tuple[int, int], str] = field(default_factory=dict)  # -> reason
    undrained: list[str] = field(default_factory=list)
    by_client: Counter = field(default_factory=Counter)  # deliveries to java / http consumers
    lock: threading.Lock = field(default_factory=threading.Lock)

    def delivered(self, partition: int, offset: int, count: int, value: str, client: str) -> None:
        with self.lock:
            self.deliveries[(partition, offset)].append((count, value))
            self.by_client[client] += 1

    def acknowledged(self, partition: int, offset: int, kind: str, outcome: str) -> None:
        with self.lock:
            self.acknowledgements[(partition, offset)].append((kind, outcome))


@dataclass(frozen=True)
class QueueReport:
    accepted_twice: tuple
    lost: tuple
    repeated_counts: tuple
    past_limit: tuple
    undrained: tuple

    @property
    def valid(self) -> bool:
        return not any(getattr(self, name) for name in CHECKS)

    def text(self) -> str:
        return "\n".join(
            f"{name}: {len(found)}" + (f" e.g. {list(found[:5])}" if found else "")
            for name in CHECKS
            for found in [getattr(self, name)]
        )


def check_queue(log: QueueLog) -> QueueReport:
    """The checks of the module docstring, on what the consumers observed."""
    by_value = {value: key for key, seen in log.deliveries.items() for _, value in seen}
    accepted_twice, lost = [], []
    for key, acks in log.acknowledgements.items():
        if sum(1 for kind, outcome in acks if kind == "accept" and outcome == "ok") > 1:
            accepted_twice.append(key)
    for value in log.inputs:
        key = by_value.get(value)
        acks = log.acknowledgements.get(key, []) if key else []
        settled = any(kind == "accept" and outcome != "failed" for kind, outcome in acks)
        if not settled and key not in log.dead_letters:
            lost.append(value)
    repeated = [
        key for key, seen in log.deliveries.items() if len({c for c, _ in seen}) != len(seen)
    ]
    past = [key for key, seen in log.deliveries.items() if max(c for c, _ in seen) > DELIVERY_LIMIT]
    return QueueReport(
        tuple(sorted(accepted_twice)),
        tuple(sorted(lost)),
        tuple(sorted(repeated)),
        tuple(sorted(past)),
        tuple(log.undrained),
    )


@dataclass
class QueueRun:
    report: QueueReport
    log: QueueLog
    elapsed_s: float
    faults: Counter
    http_errors: Counter

    @property
    def passed(self) -> bool:
        return self.report.valid

    def text(self) -> str:
        faults = ", ".join(f"{k}={v}" for k, v in sorted(self.faults.items())) or "none"
        deliveries = sum(len(seen) for seen in self.log.deliveries.values())
        redelivered = sum(1 for seen in self.log.deliveries.values() if len(seen) > 1)
        unknown = sum(
            1 for acks in self.log.acknowledgements.values() for _, o in acks if o == "unknown"
        )
        errors = ", ".join(f"{k}={v}" for k, v in sorted(self.http_errors.items())) or "none"
        return "\n".join(
            [
                f"scenario SQ elapsed={self.elapsed_s:.1f}s",
                f"faults: {faults}",
                f"http consumer errors: {errors}",
                f"inputs: {len(self.log.inputs)}, deliveries: {deliveries} "
                f"({redelivered} records delivered more than once), "
                f"dead letters: {len(self.log.dead_letters)}, acknowledgements with an unknown "
                f"outcome: {unknown}, deliveries by client: "
                + ", ".join(f"{k}={v}" for k, v in sorted(self.log.by_client.items())),
                self.report.text(),
            ]
        )


class JavaConsumer:
    """A ChaosShareConsumer process; its lines go into the log as they come."""

    def __init__(self, classes: Path, bootstrap: str, topic: str, log: QueueLog, stop: Path):
        command = apache_kafka.java_command(
            "ChaosShareConsumer", bootstrap, GROUP, topic, str(stop),
            classpath=(classes,), libs=apache_kafka.share_client_jars(),
        )  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.thread = threading.Thread(target=self._read, args=(log,), daemon=True)
        self.thread.start()

    def _read(self, log: QueueLog) -> None:
        for line in self.process.stdout:
            fields = line.split()
            if fields[:1] == ["D"] and len(fields) == 6:
                log.delivered(int(fields[1]), int(fields[2]), int(fields[3]), fields[4], "java")
            elif fields[:1] == ["A"] and len(fields) == 5:
                log.acknowledged(int(fields[1]), int(fields[2]), fields[3], fields[4])

    def join(self) -> None:
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.thread.join(10)


class HttpConsumer(threading.Thread):
    """Acquires through a random node; rejects values ending in 7, accepts most others,
    releases some and leaves some to expire (as a crashed worker would)."""

    def __init__(self, index: int, endpoints, topic: str, log: QueueLog, seed: int) -> None:
        super().__init__(name=f"http-{index}", daemon=True)
        self.endpoints, self.topic, self.log = endpoints, topic, log
        self.rng = random.Random(seed * 100 + index)
        self.stopped = threading.Event()
        self.errors: Counter = Counter()

    def run(self) -> None:
        with httpx.Client(timeout=15) as client:
            while not self.stopped.is_set():
                try:
                    self._round(client)
                except httpx.HTTPError as error:
                    self.errors[type(error).__name__] += 1
                    time.sleep(0.2)

    def _round(self, client: httpx.Client) -> None:
        url = self.rng.choice(self.endpoints).url
        body = {"topics": [self.topic], "max_records": 10, "timeout_ms": 500,
                "lock_duration_ms": HTTP_LOCK_MS}  # fmt: skip
        answer = client.post(f"{url}{SHARE}/{GROUP}/records:acquire", json=body)
        if answer.status_code != 200:
            self.errors[f"acquire {answer.status_code}"] += 1
            time.sleep(0.2)
            return
        acknowledgements, kinds = [], {}
        for record in answer.json()["records"]:
            key = (record["partition"], record["offset"])
            value = base64.b64decode(record["value"]).decode()
            self.log.delivered(*key, record["delivery_count"], value, "http")
            kind = self._decide(value)
            if kind is not None:
                acknowledgements.append({"delivery_id": record["delivery_id"], "type": kind})
                kinds[record["delivery_id"]] = (key, kind)
        if acknowledgements:
            self._acknowledge(client, acknowledgements, kinds)

    def _decide(self, value: str) -> str | None:
        if value.endswith("7"):
            return "reject"
        draw = self.rng.random()
        return None if draw < 0.05 else "release" if draw < 0.15 else "accept"

    def _acknowledge(self, client: httpx.Client, acknowledgements, kinds) -> None:
        url = self.rng.choice(self.endpoints).url
        body = {"acknowledgements": acknowledgements}
        try:
            answer = client.post(f"{url}{SHARE}/{GROUP}/records:acknowledge", json=body)
            results = answer.json().get("results", [])
        except (httpx.HTTPError, ValueError):
            results = []
        outcomes = {r["delivery_id"]: _outcome(r["error_code"]) for r in results}
        for delivery_id, (key, kind) in kinds.items():
            if kind != "release":
                self.log.acknowledged(*key, kind, outcomes.get(delivery_id, "unknown"))


# Refusals: the acknowledgement was not applied. Any other error (a 503 while the leader was
# away) leaves the outcome unknown: the leader may have stored it and died before answering.
REFUSED_CODES = (40920, 40408)


def _outcome(error_code: int | None) -> str:
    if error_code is None:
        return "ok"
    return "failed" if error_code in REFUSED_CODES else "unknown"


def run_sq(
    *,
    seed: int,
    ops: int,
    duration_s: float = 600.0,
    workdir: Path | None = None,
    partitions: int = 2,
    java_consumers: int = 2,
    http_consumers: int = 2,
    fault_every_s: tuple[float, float] = (3.0, 8.0),
    faults_min: int = 2,
    input_per_s: float = 40.0,
) -> QueueRun:
    """`ops` input records, consumed through the faults until every one is settled (or
    `duration_s`); see the module docstring."""
    from chaos.scenarios import Cluster, Nemesis, _workdir, create_topic

    rng = random.Random(seed)
    root = _workdir(workdir, "SQ")
    recorder = Recorder(root / "history.jsonl")
    ports = [free_port() for _ in range(2)]
    node_envs = [{"LAKELOG_KAFKA_PORT": str(port)} for port in ports]
    bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports)
    started = time.monotonic()
    cluster = Cluster(root / "data", recorder, nodes=2, node_envs=node_envs)
    topic, dead = f"sq-{seed}", f"sq-{seed}-dead"
    log, faults = QueueLog(), Counter()
    stop_file = root / "stop"
    consumers: list[HttpConsumer] = []
    javas: list[JavaConsumer] = []
    try:
        url = cluster.endpoint.url
        create_topic(url, topic, partitions)
        _configure(url, dead)
        classes = apache_kafka.compile_java(
            sorted(JAVA_SOURCES.glob("*.java")),
            Path(tempfile.mkdtemp(prefix="java-", dir=root)),
            apache_kafka.share_client_jars(),
        )
        javas = [
            JavaConsumer(classes, bootstrap, topic, log, stop_file) for _ in range(java_consumers)
        ]
        consumers = [
            HttpConsumer(i, cluster.endpoints, topic, log, seed) for i in range(http_consumers)
        ]
        for consumer in consumers:
            consumer.start()
        feeder = threading.Thread(
            target=_feed, args=(bootstrap, topic, ops, input_per_s, log), daemon=True
        )
        feeder.start()
        nemesis = Nemesis(rng, *fault_every_s, lambda: alternate_faults(cluster, rng, faults))
        deadline = started + duration_s
        with nemesis:
            while time.monotonic() < deadline:
                fed = not feeder.is_alive()
                if fed and nemesis.count >= faults_min and _drained(cluster, topic, partitions):
                    break
                time.sleep(1)
        feeder.join(60)
        _wait_drained(cluster, topic, partitions, log, deadline=time.monotonic() + 120)
    finally:
        stop_file.touch()
        for consumer in consumers:
            consumer.stopped.set()
        for consumer in consumers:
            consumer.join(30)
        for java in javas:
            java.join()
    try:
        log.dead_letters = _dead_letters(bootstrap, dead)
    finally:
        cluster.stop()
        recorder.close()
    return QueueRun(
        report=check_queue(log),
        log=log,
        elapsed_s=time.monotonic() - started,
        faults=faults,
        http_errors=sum((c.errors for c in consumers), Counter()),
    )


def _configure(url: str, dead: str) -> None:
    settings = {
        "share.auto.offset.reset": "earliest",
        "share.delivery.count.limit": str(DELIVERY_LIMIT),
        "share.record.lock.duration.ms": "15000",
        "errors.deadletterqueue.topic.name": dead,
    }
    data = [{"name": name, "value": value} for name, value in settings.items()]
    answer = httpx.post(f"{url}{SHARE}/{GROUP}/configs:alter", json={"data": data}, timeout=30)
    answer.raise_for_status()


def _drained(cluster, topic: str, partitions: int) -> bool:
    """Every share partition starts at its partition's end: everything is settled."""
    for endpoint in cluster.endpoints:
        try:
            group = httpx.get(f"{endpoint.url}{SHARE}/{GROUP}", timeout=5).json()
            ends = {
                p: httpx.get(
                    f"{endpoint.url}/topics/{topic}/partitions/{p}/offsets", timeout=5
                ).json()["end_offset"]
                for p in range(partitions)
            }
        except (httpx.HTTPError, ValueError, KeyError):
            continue
        starts = {p["partition_id"]: p["start_offset"] for p in group.get("partitions", [])}
        return all(starts.get(p, -1) >= end for p, end in ends.items())
    return False


def _wait_drained(cluster, topic, partitions, log: QueueLog, *, deadline: float) -> None:
    while time.monotonic() < deadline:
        if _drained(cluster, topic, partitions):
            return
        time.sleep(1)
    log.undrained.append("share partitions not settled within 120 s after the faults")


def _feed(bootstrap: str, topic: str, count: int, per_s: float, log: QueueLog) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})

    def delivered(error, message) -> None:
        if error is None:
            with log.lock:
                log.inputs[message.value().decode()] = None

    for n in range(count):
        value = f"in-{n}"
        producer.produce(topic, value=value.encode(), on_delivery=delivered)
        producer.poll(1 / per_s)
    producer.flush(60)


def _dead_letters(bootstrap: str, topic: str) -> dict[tuple[int, int], str]:
    """The dead letter topic's records: source (partition, offset) -> reason."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "enable.auto.commit": False})  # fmt: skip
    found: dict[tuple[int, int], str] = {}
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or not metadata.partitions:
            return found
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in metadata.partitions])
        idle_until = time.monotonic() + 5
        while time.monotonic() < idle_until:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            idle_until = time.monotonic() + 3
            headers = {k: v.decode() for k, v in message.headers() or []}
            source = (
                int(headers["lakelog.dlq.source.partition"]),
                int(headers["lakelog.dlq.source.offset"]),
            )
            found[source] = headers["lakelog.dlq.error"]
    finally:
        consumer.close()
    return found
