"""create_app(settings): the FastAPI gateway."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Protocol

from fastapi import Depends, FastAPI

from api.core.broker import Broker
from api.core.metrics import GROUP_LAG
from api.http.access import authorize
from api.http.consumer_instances import ConsumerInstances
from api.http.errors import install_error_handlers
from api.http.lag_history import LagHistory
from api.http.limits import BodyLimitMiddleware
from api.http.request_middleware import RequestMiddleware
from api.http.routes import (
    console,
    groups,
    internal,
    metrics,
    records,
    v2_consumers,
    v2_produce,
    v2_topics,
    v3_acls,
    v3_brokers,
    v3_groups,
    v3_maintenance,
    v3_producers,
    v3_records,
    v3_topics,
    v3_transactions,
)
from api.http.security_middleware import SecurityMiddleware
from api.security.node_auth import install_signing
from api.security.state import SecurityState
from api.version import VERSION
from conf.settings import Settings, load_settings


class Service(Protocol):
    """Something that runs beside the HTTP front-end on the same broker core (the Kafka
    listener): started after the broker, closed before it."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


def create_app(
    settings: Settings | None = None,
    *,
    broker: Broker | None = None,
    security: SecurityState | None = None,
    services: Sequence[Service] = (),
) -> FastAPI:
    settings = settings or load_settings()
    broker = broker or Broker(settings)
    security = security or SecurityState(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await broker.start()
        await security.start()
        for service in services:
            await service.start()
        if security.cluster_secret is not None:  # requests to other nodes carry a signature
            install_signing(broker.http, security.cluster_secret, settings.node_id)
        # REST consumer instances are this front-end's: the broker core knows only groups.
        consumers = ConsumerInstances(
            broker,
            broker.groups,
            instance_timeout_ms=settings.consumer_instance_timeout_ms,
            request_timeout_max_ms=settings.fetch_timeout_ms_max,
        )
        app.state.consumers = consumers
        lag_history = LagHistory(
            broker,
            interval_ms=settings.lag_sample_interval_ms,
            samples_max=settings.lag_history_samples,
        )
        app.state.lag_history = lag_history
        GROUP_LAG.source = lag_history.current_lags
        loop = asyncio.get_running_loop()
        background = [
            loop.create_task(consumers.expire_idle_forever(settings.heartbeat_ms / 1000)),
            loop.create_task(lag_history.sample_forever()),
        ]
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            for service in reversed(services):
                await service.close()
            await broker.close()

    app = FastAPI(
        title="lakelog",
        version=VERSION,
        summary="Kafka topics whose partitions are Delta tables, with the Confluent REST API.",
        lifespan=lifespan,
        # Every route is authorized by its rule in api/http/route_rules.py (fail closed).
        dependencies=[Depends(authorize)],
    )
    app.state.settings = settings
    app.state.broker = broker
    app.state.security = security
    install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware, bytes_max=settings.request_bytes_max)
    # Added last, so outermost: unauthenticated requests are refused before a body is read.
    app.add_middleware(SecurityMiddleware, security=security)
    # Outermost: every answer and log line has the request's id, refusals are counted too.
    app.add_middleware(RequestMiddleware)
    routers = (
        v2_topics,
        v2_produce,
        v2_consumers,
        groups,
        records,
        v3_brokers,
        v3_topics,
        v3_records,
        v3_producers,
        v3_transactions,
        v3_groups,
        v3_acls,
        v3_maintenance,
        internal,
        metrics,
        console,
    )
    for module in routers:
        app.include_router(module.router)

    @app.get("/", include_in_schema=False)
    async def root() -> dict:
        return {"service": "lakelog", "version": VERSION, "cluster_id": settings.cluster_id}

    return app
