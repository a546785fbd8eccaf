"""Fixtures for unmodified Kafka clients against the session's Kafka gateway (tests/conftest.py),
and for Kafka's own Java clients and tools (tests/apache_kafka.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from tests import apache_kafka

JAVA_SOURCES = Path(__file__).resolve().parent.parent / "java"


@pytest.fixture
def bootstrap(kafka_gateway) -> str:
    return kafka_gateway.kafka_address


@pytest.fixture
def http(kafka_gateway) -> httpx.Client:
    with httpx.Client(base_url=kafka_gateway.url, timeout=30.0) as client:
        yield client


@pytest.fixture(scope="session")
def java_clients(tmp_path_factory):
    """Run a scenario of tests/java/JavaClients.java (Kafka's Java clients, compiled once per
    run against Kafka's jars): `java_clients(scenario, bootstrap, name, **client_config)` is
    the JSON object it printed."""
    classes = apache_kafka.compile_java(
        [JAVA_SOURCES / "JavaClients.java"], tmp_path_factory.mktemp("java-classes")
    )

    def run(scenario: str, bootstrap: str, name: str, **client_config) -> dict:
        settings = [f"{key.replace('_', '.')}={value}" for key, value in client_config.items()]
        command = apache_kafka.java_command(
            "JavaClients", scenario, bootstrap, name, *settings, classpath=(classes,)
        )
        done = subprocess.run(command, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, f"{scenario} failed:\n{done.stderr[-4000:]}"
        return json.loads(done.stdout.splitlines()[-1])

    return run
