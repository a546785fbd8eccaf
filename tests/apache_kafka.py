"""Apache Kafka's own jars from Maven Central: the broker that lakelog is compared against, and
what Kafka users bring to lakelog unmodified: the Java clients, the command-line tools
(`kafka-topics.sh` and the others run their main classes; TOOLS maps the names), Kafka Streams,
Kafka Connect and MirrorMaker 2.

`make test` downloads them once with mvn into .venv/kafka-<version>/libs, the layout of the
distribution's libs/ (`python -m tests.apache_kafka` does it alone). Tests and benches start
JVMs from there: `tool(...)` runs a tool, `start_kafka(...)` one KRaft broker+controller node.
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.gateway_process import free_port

REPO = Path(__file__).resolve().parent.parent
KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.25.5"
KAFKA_DIR = REPO / ".venv" / f"kafka-{KAFKA_VERSION}"  # pom.xml and libs/ (the jars), reused
ARTIFACTS = (
    ("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),  # the broker (and kafka-configs)
    ("org.apache.kafka", "kafka-tools", KAFKA_VERSION),  # the other command-line tools
    ("org.apache.kafka", "kafka-streams", KAFKA_VERSION),
    ("org.apache.kafka", "connect-runtime", KAFKA_VERSION),
    ("org.apache.kafka", "connect-file", KAFKA_VERSION),
    ("org.apache.kafka", "connect-json", KAFKA_VERSION),
    ("org.apache.kafka", "connect-mirror", KAFKA_VERSION),
    ("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
    ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
)
# Share groups (KIP-932, production-ready in Kafka 4.2): Kafka 4.2's Java clients and tools
# (KafkaShareConsumer, kafka-share-groups --reset-offsets), apart, so that the rest keeps
# comparing against the same 4.1 broker and tools.
SHARE_CLIENT_VERSION = "4.2.1"
SHARE_CLIENT_DIR = REPO / ".venv" / f"kafka-clients-{SHARE_CLIENT_VERSION}"
SHARE_CLIENT_ARTIFACTS = (
    ("org.apache.kafka", "kafka-clients", SHARE_CLIENT_VERSION),
    ("org.apache.kafka", "kafka-tools", SHARE_CLIENT_VERSION),
    ("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
    ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
)
# bin/<name>.sh -> the class it runs (Kafka 4.1's bin/ scripts)
TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
}
TOOL_TIMEOUT_S = 120.0
KAFKA_HEAP = "1G"
# kafka-server-start.sh / kafka-run-class.sh defaults
KAFKA_JVM_FLAGS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
# Short-lived tools and clients: a small heap, no JIT tiers past C1 (they run for seconds).
CLIENT_JVM_FLAGS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
KAFKA_START_TIMEOUT_S = 90.0
KAFKA_STOP_TIMEOUT_S = 30.0
LOG4J2_PROPERTIES = """status = error
appender.console.type = Console
appender.console.name = STDERR
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
"""


def _pom(artifacts: tuple[tuple[str, str, str], ...]) -> str:
    dependencies = "".join(
        f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
        f"<version>{version}</version></dependency>\n"
        for group, artifact, version in artifacts
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>lakelog.tests</groupId>\n"
        "  <artifactId>apache-kafka-jars</artifactId>\n"
        "  <version>1</version>\n"
        "  <packaging>pom</packaging>\n"
        f"  <dependencies>\n{dependencies}  </dependencies>\n"
        "</project>\n"
    )


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def ensure_jars(kafka_dir: Path = KAFKA_DIR, artifacts=ARTIFACTS) -> Path:
    """The jars of `artifacts` in `kafka_dir`/libs, copied there by mvn unless a download of
    the same artifact list completed before (the stamp holds the POM's digest)."""
    libs, stamp = kafka_dir / "libs", kafka_dir / "libs.complete"
    pom = _pom(artifacts)
    digest = hashlib.sha256(pom.encode()).hexdigest()
    if stamp.exists() and stamp.read_text().split()[0] == digest:
        return libs
    for command in ("mvn", "java"):
        if shutil.which(command) is None:
            raise RuntimeError(f"{command} is not on PATH: it is needed to fetch Apache Kafka")
    log(f"downloading Apache Kafka jars from Maven Central into {libs} ...")
    kafka_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(libs, ignore_errors=True)
    (kafka_dir / "pom.xml").write_text(pom)
    command = [
        "mvn",
        "--batch-mode",
        "--no-transfer-progress",
        "-Dstyle.color=never",
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={libs}",
    ]
    subprocess.run(command, cwd=kafka_dir, check=True, stdout=sys.stderr, timeout=900)
    jars = list(libs.glob("*.jar"))
    for _group, artifact, version in artifacts:
        if not (libs / f"{artifact}-{version}.jar").exists():
            raise RuntimeError(f"mvn finished but {libs} has no {artifact}-{version}.jar")
    stamp.write_text(f"{digest} {len(jars)} jars\n")
    log(f"  {len(jars)} jars, {sum(jar.stat().st_size for jar in jars) / 1e6:.0f} MB")
    return libs


def log4j_config(directory: Path) -> Path:
    """A log4j2 configuration (warnings and errors to stderr) in `directory`."""
    path = directory / "log4j2.properties"
    if not path.exists():
        path.write_text(LOG4J2_PROPERTIES)
    return path


def java_command(
    main_class: str,
    *args: str,
    classpath: tuple[Path, ...] = (),
    options: tuple[str, ...] = (),
    libs: Path | None = None,
) -> list[str]:
    """`java ... main_class args` with Kafka's jars (`libs`, else ensure_jars()'s; and
    `classpath` before them); `options` are more JVM options (system properties)."""
    libs = libs or ensure_jars()
    entries = [*(str(entry) for entry in classpath), f"{libs}/*"]
    return [
        "java",
        *CLIENT_JVM_FLAGS,
        *options,
        f"-Dlog4j2.configurationFile={log4j_config(KAFKA_DIR)}",
        "-cp",
        ":".join(entries),
        main_class,
        *args,
    ]


def tool(
    name: str,
    *args: str,
    timeout_s: float = TOOL_TIMEOUT_S,
    stdin: str | None = None,
    java_options: tuple[str, ...] = (),
    libs: Path | None = None,
):
    """Run Kafka's `bin/<name>.sh args` as the script would (KAFKA_OPTS: `java_options`; the
    jars of `libs`, else ensure_jars()'s): its completed process."""
    return subprocess.run(
        java_command(TOOLS[name], *args, options=java_options, libs=libs),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def share_client_jars() -> Path:
    """Kafka 4.2's Java clients (KafkaShareConsumer), beside the 4.1 jars."""
    return ensure_jars(SHARE_CLIENT_DIR, SHARE_CLIENT_ARTIFACTS)


def compile_java(sources: list[Path], out_dir: Path, libs: Path | None = None) -> Path:
    """`sources` compiled against Kafka's jars (`libs`, else ensure_jars()'s) into `out_dir`
    (a class-path entry)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    libs = libs or ensure_jars()
    command = ["javac", "-nowarn", "-cp", f"{libs}/*", "-d", str(out_dir), *map(str, sources)]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
    return out_dir


# ---- one Apache Kafka node (KRaft, broker and controller) --------------------------------


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the parent dies, even by SIGKILL."""
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


@dataclass
class KafkaBroker:
    process: subprocess.Popen
    bootstrap: str
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(KAFKA_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def kafka_properties(log_dir: Path, port: int, controller_port: int, extra: dict) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": 1,
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": 1,
        "offsets.topic.replication.factor": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "default.replication.factor": 1,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "false",
        **extra,
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def start_kafka(work_dir: Path, extra: dict | None = None) -> KafkaBroker:
    """Format KRaft storage in `work_dir` and start one combined broker+controller node."""
    libs = ensure_jars()
    work_dir.mkdir(parents=True, exist_ok=True)
    port, controller_port = free_port(), free_port()
    while controller_port == port:
        controller_port = free_port()
    props = work_dir / "server.properties"
    props.write_text(kafka_properties(work_dir / "log", port, controller_port, extra or {}))
    java = ["java", f"-Dlog4j2.configurationFile={log4j_config(work_dir)}", "-cp", f"{libs}/*"]
    storage = [*java, "kafka.tools.StorageTool"]
    run = {"capture_output": True, "text": True, "check": True, "timeout": 120}
    cluster_id = subprocess.run([*storage, "random-uuid"], **run).stdout.split()[-1]
    subprocess.run([*storage, "format", "-t", cluster_id, "-c", str(props)], **run)
    log_path = work_dir / "kafka.log"
    heap = (f"-Xmx{KAFKA_HEAP}", f"-Xms{KAFKA_HEAP}")
    command = [java[0], *heap, *KAFKA_JVM_FLAGS, *java[1:], "kafka.Kafka", str(props)]
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
        )
    broker = KafkaBroker(process, f"127.0.0.1:{port}", log_path)
    try:
        wait_for_metadata(broker.bootstrap, KAFKA_START_TIMEOUT_S, process)
    except BaseException:
        log(f"Kafka log (last lines):\n{broker.log_tail()}")
        broker.stop()
        raise
    return broker


def wait_for_metadata(bootstrap: str, timeout_s: float, process: subprocess.Popen) -> None:
    """Until the port accepts and a Metadata request names a broker."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    host, port = bootstrap.rsplit(":", 1)
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited early (code {process.returncode})")
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
        except OSError:
            time.sleep(0.2)
            continue
        try:
            if AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=2).brokers:
                return
        except confluent_kafka.KafkaException:
            time.sleep(0.2)
    raise RuntimeError(f"no Metadata answer from {bootstrap} within {timeout_s:g}s")


if __name__ == "__main__":
    print(ensure_jars())
    print(share_client_jars())
