"""Shared fixtures: a real gateway process on loopback, HTTP clients, unique topic names."""

from __future__ import annotations

import itertools
import os

import httpx
import pytest

from tests.gateway_process import GatewayProcess, start_gateway

_topic_counter = itertools.count()

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"


@pytest.fixture(scope="session")
def gateway(tmp_path_factory) -> GatewayProcess:
    """One gateway process for the whole run (tests use their own topics)."""
    process = start_gateway(tmp_path_factory.mktemp("gateway") / "data")
    yield process
    process.stop()


@pytest.fixture
def client(gateway) -> httpx.Client:
    with httpx.Client(base_url=gateway.url, timeout=30.0) as http:
        yield http


@pytest.fixture
def topic_name(request) -> str:
    """A topic name unique in this run, readable in logs."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"{base}-{next(_topic_counter)}"


def create_topic(client: httpx.Client, name: str, partitions: int = 1, **configs) -> dict:
    body = {
        "topic_name": name,
        "partitions_count": partitions,
        "configs": [{"name": k.replace("_", "."), "value": str(v)} for k, v in configs.items()],
    }
    response = client.post("/v3/clusters/lakelog/topics", json=body)
    assert response.status_code == 201, response.text
    return response.json()


@pytest.fixture(scope="session")
def kafka_gateway(tmp_path_factory) -> GatewayProcess:
    """A gateway serving the Kafka protocol beside HTTP (tests/kafka, Spark's format("kafka"))."""
    env = {
        "LAKELOG_LAG_SAMPLE_INTERVAL_MS": "200",  # the lag metric is the latest sample
        # KIP-848 members heartbeat this often: a reassignment takes a few heartbeats
        "LAKELOG_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "500",
    }
    process = start_gateway(tmp_path_factory.mktemp("kafka") / "data", env=env, kafka=True)
    yield process
    process.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """One moto S3 server for the run, its AWS_* variables set in this process too (as a user
    sets them), so in-process stores and delta-rs reach it. Tests take their own buckets."""
    from tests.s3_server import start_s3_server

    yield from _serving_with_env(start_s3_server(tmp_path_factory.mktemp("s3")))


@pytest.fixture
def s3_root(s3_server) -> str:
    """A storage root in a new bucket: `s3://<bucket>/lakelog`."""
    return f"s3://{s3_server.create_bucket()}/lakelog"


@pytest.fixture(scope="session")
def azure_server(tmp_path_factory):
    """One Azurite blob service for the run (installed by `make install`), its AZURE_*
    variables set in this process as a user sets them. Tests take their own containers."""
    from tests.azurite_server import azurite_installed, start_azurite

    if not azurite_installed():
        pytest.fail("Azurite is not installed under .venv/azurite: run `make install`")
    yield from _serving_with_env(start_azurite(tmp_path_factory.mktemp("azurite")))


@pytest.fixture
def azure_root(azure_server) -> str:
    """A storage root in a new container: `az://<container>/lakelog`."""
    return f"az://{azure_server.create_container()}/lakelog"


def _serving_with_env(server):
    """Yield `server` with its variables set in this process; restore them and stop it."""
    saved = {name: os.environ.get(name) for name in server.env}
    os.environ.update(server.env)
    try:
        yield server
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.stop()
