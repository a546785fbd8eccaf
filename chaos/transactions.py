"""TX: exactly-once copy under faults, in the spirit of Kafka's TransactionsTest.

Copiers (librdkafka consumers and transactional producers, unmodified clients on the Kafka
port; in TX2 Apache Kafka's Java clients, chaos/java/TxCopier.java, whose Kafka 4 producer
uses KIP-890's second transaction protocol) copy an input topic to an output topic: each
batch is read, written to the output inside a transaction together with its input offsets
(send_offsets_to_transaction), and committed;
any failure aborts the transaction and rewinds the consumer to its committed offsets, as the
exactly-once loop of Kafka's docs does. Meanwhile gateways are `kill -9`ed and restarted, and
paused (SIGSTOP past their leases, then SIGCONT), and a read_committed reader tails the output.

Each output record is `<input value>|<transaction tag>`; the copier logs every transaction it
begins (its tag and record count) and how it ended. The checker (`check_copy`) then proves:

- exactly once: every input value is in the committed output once, none twice (lost or
  duplicated records);
- no aborted read: nothing a read_committed reader saw is missing from the final committed
  output, and no record of a transaction whose abort was acknowledged is ever seen (the anomaly
  a Kafka-compatible system still had: read_committed consumers seeing aborted records);
- no torn transaction: a transaction in the output is there whole (all records it wrote);
- no lost acknowledged commit: a transaction whose commit was acknowledged is in the output.

Copiers own fixed input partitions (assign, not subscribe): the group's offsets are committed
through the transactions, and a partition moving between copiers mid-transaction, which the
group protocol would add, is what this scenario does not exercise.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from chaos.history import GATEWAY_KILL, Recorder
from tests import apache_kafka
from tests.gateway_process import free_port

TRANSACTION_TIMEOUT_MS = 20_000
BATCH_RECORDS_MAX = 20
PAUSE_S = (2.0, 6.0)
CLIENT_TIMEOUT_S = 30.0
GROUP = "tx-copier"
QUIET_S = 3.0
JAVA_SOURCES = Path(__file__).parent / "java"


@dataclass
class CopyLog:
    """What the copiers and readers did: the checker's input (JSON lines on disk too)."""

    inputs: list[str] = field(default_factory=list)
    begun: dict[str, int] = field(default_factory=dict)  # tag -> records written
    committed: set[str] = field(default_factory=set)  # tags whose commit was acknowledged
    aborted: set[str] = field(default_factory=set)  # tags whose abort was acknowledged
    seen_during: list[str] = field(default_factory=list)  # by the tailing read_committed reader
    final: list[str] = field(default_factory=list)  # the committed output, read at the end
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def to_json(self) -> str:
        return json.dumps(
            {
                "inputs": self.inputs,
                "begun": self.begun,
                "committed": sorted(self.committed),
                "aborted": sorted(self.aborted),
                "seen_during": self.seen_during,
                "final": self.final,
            }
        )


CHECKS = ("lost", "duplicated", "aborted_reads", "torn", "lost_commits")


@dataclass(frozen=True)
class CopyReport:
    lost: tuple[str, ...]  # input values not in the committed output
    duplicated: tuple[str, ...]  # input values there more than once
    aborted_reads: tuple[str, ...]  # records a read_committed reader saw that did not commit
    torn: tuple[str, ...]  # tags with only part of their records in the output
    lost_commits: tuple[str, ...]  # acknowledged commits whose records are not there

    @property
    def valid(self) -> bool:
        return not (
            self.lost or self.duplicated or self.aborted_reads or self.torn or self.lost_commits
        )

    def summary(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in CHECKS}

    def text(self) -> str:
        lines = []
        for name in CHECKS:
            found = getattr(self, name)
            lines.append(f"{name}: {len(found)}" + (f" e.g. {list(found[:5])}" if found else ""))
        return "\n".join(lines)


def check_copy(log: CopyLog) -> CopyReport:
    """The exactly-once, aborted-read, torn-transaction and lost-commit checks (module doc)."""
    final = Counter(log.final)
    copied = Counter(record.split("|", 1)[0] for record in log.final)
    tags = Counter(record.split("|", 1)[1] for record in log.final)
    seen = log.seen_during + log.final
    aborted_reads = {r for r in seen if r not in final or r.split("|", 1)[1] in log.aborted}
    return CopyReport(
        lost=tuple(v for v in log.inputs if copied[v] == 0),
        duplicated=tuple(sorted(v for v, n in copied.items() if n > 1)),
        aborted_reads=tuple(sorted(aborted_reads)),
        torn=tuple(sorted(t for t, n in tags.items() if n != log.begun.get(t))),
        lost_commits=tuple(sorted(t for t in log.committed if tags[t] != log.begun.get(t))),
    )


@dataclass
class TxRun:
    report: CopyReport
    log: CopyLog
    elapsed_s: float
    faults: Counter
    committed_transactions: int
    aborted_transactions: int
    log_path: Path
    client: str = "librdkafka"
    client_errors: Counter = field(default_factory=Counter)  # what the copiers met, by name

    @property
    def passed(self) -> bool:
        return self.report.valid

    def text(self) -> str:
        faults = ", ".join(f"{k}={v}" for k, v in sorted(self.faults.items())) or "none"
        return "\n".join(
            [
                f"scenario TX ({self.client} copiers) elapsed={self.elapsed_s:.1f}s "
                f"log {self.log_path}",
                f"faults: {faults}",
                "client errors: "
                + (", ".join(f"{k}={v}" for k, v in sorted(self.client_errors.items())) or "none"),
                f"transactions: committed={self.committed_transactions} "
                f"aborted={self.aborted_transactions} begun={len(self.log.begun)}",
                f"input records: {len(self.log.inputs)}, output read: {len(self.log.final)}",
                self.report.text(),
            ]
        )


class Copier:
    """One copier: a read_committed consumer of its input partitions and a transactional
    producer, in a thread; recreated whole after a fatal error (fencing included)."""

    def __init__(self, index: int, bootstrap: str, names: tuple[str, str], partitions, log):
        self.index, self.bootstrap, self.log = index, bootstrap, log
        self.source, self.sink = names
        self.partitions = list(partitions)
        self.stopped = threading.Event()
        self.errors: Counter = Counter()
        self.thread = threading.Thread(target=self._run, name=f"copier-{index}", daemon=True)

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                consumer, producer = self._clients()
            except KafkaException as error:
                self.errors[_name(error)] += 1
                time.sleep(1)
                continue
            try:
                self._copy(consumer, producer)
            finally:
                consumer.close()

    def _clients(self) -> tuple[Consumer, Producer]:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": f"tx-copier-{self.index}",
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "message.timeout.ms": TRANSACTION_TIMEOUT_MS,
            }
        )
        producer.init_transactions(CLIENT_TIMEOUT_S)
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": GROUP,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign(self._committed_positions(consumer))
        return consumer, producer

    def _committed_positions(self, consumer: Consumer) -> list[TopicPartition]:
        wanted = [TopicPartition(self.source, p) for p in self.partitions]
        positions = consumer.committed(wanted, timeout=CLIENT_TIMEOUT_S)
        return [
            TopicPartition(
                tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            )
            for tp in positions
        ]

    def _copy(self, consumer: Consumer, producer: Producer) -> None:
        """Batches until stopped; returns to get new clients after a fatal error or a failed
        abort (the new producer's init_transactions fences this one and aborts its open
        transaction, whose outcome this copier then never learns)."""
        while not self.stopped.is_set():
            messages = [m for m in consumer.consume(BATCH_RECORDS_MAX, 1.0) if m.error() is None]
            if not messages:
                continue
            tag = f"{self.index}-{uuid.uuid4().hex[:10]}"
            try:
                self._transaction(consumer, producer, messages, tag)
            except KafkaException as error:
                self.errors[_name(error)] += 1
                if _kafka_error(error).fatal() or not self._abort(consumer, producer, tag):
                    return

    def _transaction(self, consumer: Consumer, producer: Producer, messages, tag: str) -> None:
        producer.begin_transaction()
        with self.log.lock:
            self.log.begun[tag] = len(messages)
        for message in messages:
            value = message.value().decode()
            producer.produce(self.sink, key=value.encode(), value=f"{value}|{tag}".encode())
        positions = consumer.position(consumer.assignment())
        metadata = consumer.consumer_group_metadata()
        producer.send_offsets_to_transaction(positions, metadata, CLIENT_TIMEOUT_S)
        self._commit(producer, tag)

    def _commit(self, producer: Producer, tag: str) -> None:
        """Commit; a retriable failure is retried (librdkafka allows it), others propagate."""
        while True:
            try:
                producer.commit_transaction(CLIENT_TIMEOUT_S)
                break
            except KafkaException as error:
                if self.stopped.is_set() or not _kafka_error(error).retriable():
                    raise
                self.errors["commit-retried:" + _name(error)] += 1
        with self.log.lock:
            self.log.committed.add(tag)

    def _abort(self, consumer: Consumer, producer: Producer, tag: str) -> bool:
        """Abort the open transaction and rewind to the committed offsets; False if the abort
        failed (the clients are replaced)."""
        try:
            producer.abort_transaction(CLIENT_TIMEOUT_S)
        except KafkaException as error:
            self.errors["abort:" + _name(error)] += 1
            return False
        with self.log.lock:
            self.log.aborted.add(tag)
        consumer.assign(self._committed_positions(consumer))
        return True


class JavaCopier:
    """One copier with Kafka's Java clients (chaos/java/TxCopier.java) in a process of its
    own, recreating its clients itself after a fatal error; its events (one JSON object per
    line) go into the log as the Python copier's do. It stops when its input is closed."""

    def __init__(self, index: int, bootstrap: str, names: tuple[str, str], partitions, log,
                 classes: Path):  # fmt: skip
        arguments = [bootstrap, str(index), *names, GROUP, str(TRANSACTION_TIMEOUT_MS)]
        arguments += [str(p) for p in partitions]
        self.command = apache_kafka.java_command("TxCopier", *arguments, classpath=(classes,))
        self.log = log
        self.stopped = threading.Event()
        self.errors: Counter = Counter()
        self.thread = threading.Thread(target=self._run, name=f"java-copier-{index}", daemon=True)

    def _run(self) -> None:
        process = subprocess.Popen(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        closer = threading.Thread(target=self._close_when_stopped, args=(process,), daemon=True)
        closer.start()
        for line in process.stdout:
            self._record(line)
        process.wait()

    def _close_when_stopped(self, process: subprocess.Popen) -> None:
        self.stopped.wait()
        process.stdin.close()

    def _record(self, line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return  # not one of its events
        with self.log.lock:
            if "begun" in event:
                self.log.begun[event["begun"]] = event["count"]
            elif "committed" in event:
                self.log.committed.add(event["committed"])
            elif "aborted" in event:
                self.log.aborted.add(event["aborted"])
            elif "error" in event:
                self.errors[event["error"]] += 1


def compile_java_copier(out_dir: Path) -> Path:
    """TxCopier compiled against Kafka's jars: a class-path entry."""
    return apache_kafka.compile_java(sorted(JAVA_SOURCES.glob("*.java")), out_dir)


def _kafka_error(error: KafkaException) -> KafkaError:
    return error.args[0]


def _name(error: KafkaException) -> str:
    return _kafka_error(error).name()


def read_committed(bootstrap: str, topic: str, partitions: int, until_count: int, timeout_s):
    """The committed output, from offset 0 of every partition: at least `until_count` records
    (or what came before the timeout), then on until nothing more comes for QUIET_S (records
    beyond the count are duplicates or aborted ones the checker must see)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"tx-check-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value().decode())
                quiet_since = time.monotonic()
            elif len(seen) >= until_count and time.monotonic() - quiet_since > QUIET_S:
                break
    finally:
        consumer.close()
    return seen


class Tail(threading.Thread):
    """A read_committed reader of the output during the run (aborted reads show here)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, log: CopyLog) -> None:
        super().__init__(name="tx-tail", daemon=True)
        self.bootstrap, self.topic, self.partitions, self.log = bootstrap, topic, partitions, log
        self.stopped = threading.Event()

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"tx-tail-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        topic_partitions = [
            TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)
        ]
        consumer.assign(topic_partitions)
        try:
            while not self.stopped.is_set():
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    self.log.seen_during.append(message.value().decode())
        finally:
            consumer.close()


def alternate_faults(cluster, rng: random.Random, faults: Counter) -> None:
    """kill -9 and restart node 0, or pause a node past its lease and let it go on, in turns."""
    if faults[GATEWAY_KILL] <= faults["pause"]:
        cluster.kill_and_restart()
        faults[GATEWAY_KILL] += 1
        return
    node = rng.randrange(len(cluster.gateways))
    cluster.signal(node, signal.SIGSTOP, "pause", f"node {node}")
    time.sleep(rng.uniform(*PAUSE_S))
    cluster.signal(node, signal.SIGCONT, "resume", f"node {node}")
    faults["pause"] += 1


def run_tx(
    *,
    seed: int,
    ops: int,
    duration_s: float = 600.0,
    workdir: Path | None = None,
    partitions: int = 3,
    copiers: int = 2,
    fault_every_s: tuple[float, float] = (3.0, 8.0),
    faults_min: int = 2,
    input_per_s: float = 40.0,
    client: str = "librdkafka",
) -> TxRun:
    """Copy `ops` input records, written at `input_per_s` while the copy runs, exactly once
    while the nemesis strikes (module docstring); faults stop once everything acknowledged is
    copied and `faults_min` were injected (kills and pauses in turns), or at `duration_s`.
    `client`: the copiers' clients, "librdkafka" or "java" (Kafka's, transactions v2)."""
    # Imported here: chaos.scenarios imports this module for its SCENARIOS table.
    from chaos.scenarios import Cluster, Nemesis, _workdir, create_topic

    rng = random.Random(seed)
    root = _workdir(workdir, "TX")
    recorder = Recorder(root / "history.jsonl")
    ports = [free_port() for _ in range(2)]
    node_envs = [{"LAKELOG_KAFKA_PORT": str(port)} for port in ports]
    bootstrap = ",".join(f"127.0.0.1:{port}" for port in ports)
    started = time.monotonic()
    cluster = Cluster(root / "data", recorder, nodes=2, node_envs=node_envs)
    names = (f"tx-in-{seed}", f"tx-out-{seed}")
    log, faults = CopyLog(), Counter()
    workers: list[Copier] = []
    tail = Tail(bootstrap, names[1], partitions, log)
    try:
        for name in names:
            create_topic(cluster.endpoint.url, name, partitions)
        feeder = threading.Thread(
            target=_feed, args=(bootstrap, names[0], ops, input_per_s, log), daemon=True
        )
        feeder.start()
        workers = _copiers(client, copiers, bootstrap, names, partitions, log, root)
        for worker in workers:
            worker.thread.start()
        tail.start()
        nemesis = Nemesis(rng, *fault_every_s, lambda: alternate_faults(cluster, rng, faults))
        deadline = started + duration_s
        with nemesis:
            while time.monotonic() < deadline:
                fed = not feeder.is_alive()
                if fed and _copied(log) >= len(log.inputs) and nemesis.count >= faults_min:
                    break
                time.sleep(1)
        feeder.join(60)
        _wait_copied(log, len(log.inputs), deadline=time.monotonic() + 120)
    finally:
        for worker in workers:
            worker.stopped.set()
        for worker in workers:
            worker.thread.join(60)
        tail.stopped.set()
        tail.join(30)
    try:
        log.final = read_committed(bootstrap, names[1], partitions, _copied(log), timeout_s=60)
    finally:
        cluster.stop()
        recorder.close()
    log_path = root / "copy.json"
    log_path.write_text(log.to_json())
    return TxRun(
        report=check_copy(log),
        log=log,
        elapsed_s=time.monotonic() - started,
        faults=faults,
        committed_transactions=len(log.committed),
        aborted_transactions=len(log.aborted),
        log_path=log_path,
        client=client,
        client_errors=sum((worker.errors for worker in workers), Counter()),
    )


def run_tx2(**options) -> TxRun:
    """TX with Kafka's Java clients as copiers: transactions v2 (KIP-890) under the faults."""
    return run_tx(client="java", **options)


def _copiers(client: str, count: int, bootstrap: str, names, partitions: int, log, root: Path):
    shares = [range(k, partitions, count) for k in range(count)]
    if client == "librdkafka":
        return [Copier(k, bootstrap, names, shares[k], log) for k in range(count)]
    classes = compile_java_copier(Path(tempfile.mkdtemp(prefix="java-", dir=root)))
    return [JavaCopier(k, bootstrap, names, shares[k], log, classes) for k in range(count)]


def _copied(log: CopyLog) -> int:
    with log.lock:
        return sum(log.begun[tag] for tag in log.committed)


def _wait_copied(log: CopyLog, ops: int, *, deadline: float) -> None:
    """After the faults: the copiers catch up (every input record in a committed transaction)."""
    while _copied(log) < ops and time.monotonic() < deadline:
        time.sleep(0.5)


def _feed(bootstrap: str, topic: str, count: int, per_s: float, log: CopyLog) -> None:
    """The input: `count` distinct values, written idempotently at `per_s` during the faults;
    those acknowledged are the inputs the copy must hold (one whose delivery failed may or may
    not be there: it is not counted lost, but still only once)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})

    def delivered(error, message) -> None:
        if error is None:
            with log.lock:
                log.inputs.append(message.value().decode())

    for n in range(count):
        value = f"in-{n}"
        producer.produce(topic, key=value.encode(), value=value.encode(), on_delivery=delivered)
        producer.poll(1 / per_s)
    producer.flush(60)
