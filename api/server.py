"""One gateway node: the broker core with its front-ends, HTTP always and the Kafka listener when
`kafka_port` is set. The only module that knows both front-ends (the layers in pyproject.toml
keep them apart)."""

from __future__ import annotations

from fastapi import FastAPI

from api.core.broker import Broker
from api.http.app import create_app
from api.kafka.listener import KafkaListener
from api.security.state import SecurityState
from conf.settings import Settings


def node_app(settings: Settings) -> FastAPI:
    """The ASGI app of a node; its lifespan starts the broker, then the Kafka listener."""
    broker = Broker(settings)
    security = SecurityState(settings)  # one for both front-ends: keys, ACLs, quotas
    services = [KafkaListener(broker, security, settings)] if settings.kafka_port else []
    return create_app(settings, broker=broker, security=security, services=services)
