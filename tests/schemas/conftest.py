"""Fixtures of the schema tests: the Kafka listener of the session's Kafka gateway."""

from __future__ import annotations

import pytest


@pytest.fixture
def bootstrap(kafka_gateway) -> str:
    return kafka_gateway.kafka_address
