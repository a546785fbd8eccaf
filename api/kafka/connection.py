"""What a handler knows of the connection a request came on."""

from __future__ import annotations

from dataclasses import dataclass

from api.core.broker import Broker
from conf.settings import Settings


@dataclass(slots=True)
class Connection:
    """One client connection: the broker core it talks to and who it is."""

    broker: Broker
    settings: Settings
    peer: str
    client_id: str | None = None
