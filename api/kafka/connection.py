"""What a handler knows of the connection a request came on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from api.core.broker import Broker
from api.kafka.fetch_sessions import FetchSessions
from api.security.errors import AuthorizationFailed
from api.security.state import ANONYMOUS, SecurityState
from conf.settings import Settings


def _nothing() -> None:
    pass


@dataclass(slots=True)
class Connection:
    """One client connection: the broker core it talks to and who it is."""

    broker: Broker
    security: SecurityState
    settings: Settings
    host: str
    fetch_sessions: FetchSessions
    client_id: str | None = None
    principal: str = ANONYMOUS
    authenticated: bool = False  # by SASL; stays False with authentication off
    sasl_mechanism: str | None = None
    close_after_answer: bool = False  # a failed SASL authentication: answer, then hang up
    # Lets the connection start its next request: a produce calls it once its records are
    # queued at their partitions (api/kafka/listener.py keeps a producer's batches in order).
    admit: Callable[[], None] = _nothing

    def permits(self, operation: str, resource_type: str, name: str) -> bool:
        """Kafka's ACL check of this connection's principal (always true with ACLs off)."""
        return self.security.allowed(self.principal, self.host, operation, resource_type, name)

    def check(self, operation: str, resource_type: str, name: str) -> None:
        """Raises AuthorizationFailed (naming the resource type, for the error code) unless
        the principal may do `operation` on the resource."""
        if not self.permits(operation, resource_type, name):
            raise AuthorizationFailed(
                f"{self.principal} is not authorized to {operation} {resource_type} '{name}'.",
                resource_type=resource_type,
            )

    def permits_on_any(self, operation: str, resource_type: str) -> bool:
        return self.security.allowed_on_any(self.principal, self.host, operation, resource_type)
