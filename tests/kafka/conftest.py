"""A gateway process serving the Kafka protocol beside HTTP, for unmodified Kafka clients."""

from __future__ import annotations

import httpx
import pytest

from tests.gateway_process import GatewayProcess, start_gateway


@pytest.fixture(scope="session")
def kafka_gateway(tmp_path_factory) -> GatewayProcess:
    process = start_gateway(tmp_path_factory.mktemp("kafka") / "data", kafka=True)
    yield process
    process.stop()


@pytest.fixture
def bootstrap(kafka_gateway) -> str:
    return kafka_gateway.kafka_address


@pytest.fixture
def http(kafka_gateway) -> httpx.Client:
    with httpx.Client(base_url=kafka_gateway.url, timeout=30.0) as client:
        yield client
