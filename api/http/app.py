"""The HTTP front-end (the gateway): create_app builds its FastAPI app; HttpFrontEnd attaches it
to a node (api/node.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from fastapi import APIRouter, Depends, FastAPI

from api.core.broker import Broker
from api.core.lag_history import LagHistory
from api.http.access import authorize
from api.http.consumer_instances import ConsumerInstances
from api.http.errors import install_error_handlers
from api.http.limits import BodyLimitMiddleware
from api.http.request_middleware import RequestMiddleware
from api.http.routes import (
    console,
    groups,
    internal,
    metrics,
    records,
    schema_registry,
    share_groups,
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
from api.http.schema_formats import SchemaFormats
from api.http.security_middleware import SecurityMiddleware
from api.security.state import SecurityState
from api.version import VERSION
from conf.settings import Settings, load_settings

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


class HttpFrontEnd:
    """The gateway: the Confluent REST API (and the console, the metrics) on a node's broker.
    Its REST consumer instances are this front-end's own: the broker core knows only groups."""

    def __init__(
        self,
        settings: Settings,
        security: SecurityState,
        lag_history: LagHistory,
        *,
        lifespan: Lifespan | None = None,
    ) -> None:
        self.app = create_app(
            settings, security=security, lag_history=lag_history, lifespan=lifespan
        )
        self._settings = settings
        self._tasks: list[asyncio.Task] = []

    async def start(self, broker: Broker) -> None:
        settings = self._settings
        consumers = ConsumerInstances(
            broker,
            broker.groups,
            instance_timeout_ms=settings.consumer_instance_timeout_ms,
            request_timeout_max_ms=settings.fetch_timeout_ms_max,
        )
        self.app.state.broker = broker
        self.app.state.consumers = consumers
        self.app.state.schema_formats = SchemaFormats(broker.schemas)
        expiry = consumers.expire_idle_forever(settings.heartbeat_ms / 1000)
        self._tasks.append(asyncio.get_running_loop().create_task(expiry))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def create_app(
    settings: Settings | None = None,
    *,
    security: SecurityState | None = None,
    lag_history: LagHistory | None = None,
    lifespan: Lifespan | None = None,
) -> FastAPI:
    """The gateway's ASGI app: routes, error answers, middleware. It serves once a node has
    started the front-end (HttpFrontEnd.start); `lifespan` is how the server runs the node."""
    settings = settings or load_settings()
    security = security or SecurityState(settings)
    app = FastAPI(
        title="lakelog",
        version=VERSION,
        summary="Kafka topics whose partitions are Delta tables, with the Confluent REST API.",
        lifespan=lifespan,
        # Every route is authorized by its rule in api/http/route_rules.py (fail closed).
        dependencies=[Depends(authorize)],
    )
    app.state.settings = settings
    app.state.security = security
    app.state.lag_history = lag_history
    install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware, bytes_max=settings.request_bytes_max)
    # Added last, so outermost: unauthenticated requests are refused before a body is read.
    app.add_middleware(SecurityMiddleware, security=security)
    # Outermost: every answer and log line has the request's id, refusals are counted too.
    app.add_middleware(RequestMiddleware)
    # The produce and consume routes first: FastAPI tries the routes in order (a sixth of a
    # one-record produce's CPU went to matching past 70 routes). No two routers answer the
    # same path and method (tests/unit/test_route_order.py), so the order changes only the
    # cost.
    routers = (
        v3_records,
        v2_produce,
        records,
        v2_consumers,
        v2_topics,
        groups,
        v3_brokers,
        v3_topics,
        v3_producers,
        v3_transactions,
        v3_groups,
        v3_acls,
        v3_maintenance,
        share_groups,
        schema_registry,
        internal,
        metrics,
        console,
    )
    for module in routers:
        _add_routes(app, module.router)

    @app.get("/", include_in_schema=False)
    async def root() -> dict:
        return {"service": "lakelog", "version": VERSION, "cluster_id": settings.cluster_id}

    return app


# What each route keeps of its router when it joins the app (APIRouter.add_api_route's
# arguments; the router's prefix and tags are in the route's path and tags already).
_ROUTE_SETTINGS = (
    "response_model",
    "status_code",
    "tags",
    "dependencies",
    "summary",
    "description",
    "response_description",
    "responses",
    "deprecated",
    "methods",
    "operation_id",
    "response_model_include",
    "response_model_exclude",
    "response_model_by_alias",
    "response_model_exclude_unset",
    "response_model_exclude_defaults",
    "response_model_exclude_none",
    "include_in_schema",
    "response_class",
    "name",
    "callbacks",
    "openapi_extra",
    "generate_unique_id_function",
    "strict_content_type",
)


def _add_routes(app: FastAPI, router: APIRouter) -> None:
    """`router`'s routes as routes of the app itself, as include_router made them before
    FastAPI 0.16x: it now keeps a router as one entry and matches a request against every
    route of every router before the one that answers it, twice, through per-route context
    switches (two thirds of a GET's CPU). The app's dependency (authorize) joins each route
    as the app's add_api_route adds it."""
    for route in router.routes:
        settings = {name: getattr(route, name) for name in _ROUTE_SETTINGS}
        app.router.add_api_route(route.path, route.endpoint, **settings)
