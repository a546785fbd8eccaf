"""FastAPI dependencies as Annotated aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from api.core.broker import Broker
from api.http.consumer_instances import ConsumerInstances
from conf.settings import Settings


# async: FastAPI runs a plain `def` dependency in its thread pool, a thread hop per request.
async def get_broker(request: Request) -> Broker:
    return request.app.state.broker


async def get_consumers(request: Request) -> ConsumerInstances:
    return request.app.state.consumers


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


BrokerDep = Annotated[Broker, Depends(get_broker)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
ConsumersDep = Annotated[ConsumerInstances, Depends(get_consumers)]


def base_url(request: Request, settings: Settings) -> str:
    """The URL clients should use for links: the advertised URL, else the request's own."""
    if settings.advertised_url:
        return settings.advertised_url.rstrip("/")
    return str(request.base_url).rstrip("/")
