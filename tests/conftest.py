"""Shared fixtures: a real gateway process on loopback, HTTP clients, unique topic names."""

from __future__ import annotations

import itertools

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
