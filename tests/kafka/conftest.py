"""Fixtures for unmodified Kafka clients against the session's Kafka gateway (tests/conftest.py)."""

from __future__ import annotations

import httpx
import pytest


@pytest.fixture
def bootstrap(kafka_gateway) -> str:
    return kafka_gateway.kafka_address


@pytest.fixture
def http(kafka_gateway) -> httpx.Client:
    with httpx.Client(base_url=kafka_gateway.url, timeout=30.0) as client:
        yield client
