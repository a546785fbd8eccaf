"""Fixtures for unmodified Kafka clients against the session's Kafka gateway (tests/conftest.py),
and for Kafka's own Java clients and tools (tests/apache_kafka.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from tests import apache_kafka
from tests.gateway_process import start_gateway
from tests.security.helpers import AUTH_ENV, make_keys

JAVA_SOURCES = Path(__file__).resolve().parent.parent / "java"


@pytest.fixture
def bootstrap(kafka_gateway) -> str:
    return kafka_gateway.kafka_address


@pytest.fixture
def http(kafka_gateway) -> httpx.Client:
    with httpx.Client(base_url=kafka_gateway.url, timeout=30.0) as client:
        yield client


@pytest.fixture(scope="session")
def java_classes(tmp_path_factory) -> Path:
    """tests/java/*.java compiled once per run against Kafka's jars: a class-path entry."""
    sources = sorted(JAVA_SOURCES.glob("*.java"))
    return apache_kafka.compile_java(sources, tmp_path_factory.mktemp("java-classes"))


@pytest.fixture(scope="session")
def java_clients(java_classes):
    """Run a scenario of tests/java/JavaClients.java (Kafka's Java clients):
    `java_clients(scenario, bootstrap, name, **client_config)` is the JSON object it printed."""
    return _java_scenarios("JavaClients", java_classes)


@pytest.fixture(scope="session")
def consumer_protocol(java_classes):
    """Run a scenario of tests/java/ConsumerProtocol.java (KIP-848 with Kafka's Java consumer),
    as `java_clients` runs JavaClients'."""
    return _java_scenarios("ConsumerProtocol", java_classes)


def _java_scenarios(main_class: str, java_classes: Path):
    def run(scenario: str, bootstrap: str, name: str, **client_config) -> dict:
        settings = [f"{key.replace('_', '.')}={value}" for key, value in client_config.items()]
        command = apache_kafka.java_command(
            main_class, scenario, bootstrap, name, *settings, classpath=(java_classes,)
        )
        done = subprocess.run(command, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, f"{scenario} failed:\n{done.stderr[-4000:]}"
        return json.loads(done.stdout.splitlines()[-1])

    return run


@pytest.fixture(scope="session")
def acl_node(tmp_path_factory):
    """A node with API keys and Kafka's ACLs: (gateway, {principal: token}) for the super user
    `admin` and the ordinary users `dave` and `erin`."""
    data_dir = tmp_path_factory.mktemp("acl-node") / "data"
    tokens = make_keys(data_dir, "admin", "dave", "erin")
    gateway = start_gateway(data_dir, env=AUTH_ENV, kafka=True)
    yield gateway, tokens
    gateway.stop()


@pytest.fixture(scope="session")
def apache_kafka_broker(tmp_path_factory):
    """One Apache Kafka 4.1 node (KRaft, broker and controller) for the run: the system
    lakelog is compared with, and the source a migration replicates from."""
    broker = apache_kafka.start_kafka(tmp_path_factory.mktemp("apache-kafka"))
    yield broker
    broker.stop()
