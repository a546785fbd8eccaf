"""Fixtures of the schema tests: the Kafka listener of the session's Kafka gateway."""

from __future__ import annotations

import pytest


@pytest.fixture
def bootstrap(kafka_gateway) -> str:
    return kafka_gateway.kafka_address


@pytest.fixture
def client_of_kafka_gateway(kafka_gateway):
    import httpx

    with httpx.Client(base_url=kafka_gateway.url, timeout=30.0) as client:
        yield client
