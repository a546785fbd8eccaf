"""What a handler knows of the connection a request came on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from api.core.broker import Broker
from api.kafka.fetch_sessions import FetchSessions
from api.kafka.share_sessions import ShareSessions
from api.security.errors import AuthorizationFailed
from api.security.state import ANONYMOUS, SecurityState
from conf.settings import Settings

# Kafka's AclOperation codes of the operations each resource type has.
AUTHORIZED_OPERATIONS = {
    "topic": {
        "READ": 3,
        "WRITE": 4,
        "CREATE": 5,
        "DELETE": 6,
        "ALTER": 7,
        "DESCRIBE": 8,
        "DESCRIBE_CONFIGS": 10,
        "ALTER_CONFIGS": 11,
    },
    "cluster": {
        "CREATE": 5,
        "ALTER": 7,
        "DESCRIBE": 8,
        "CLUSTER_ACTION": 9,
        "DESCRIBE_CONFIGS": 10,
        "ALTER_CONFIGS": 11,
        "IDEMPOTENT_WRITE": 12,
    },
}


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
    share_sessions: ShareSessions
    client_id: str | None = None
    principal: str = ANONYMOUS
    authenticated: bool = False  # by SASL; stays False with authentication off
    sasl_mechanism: str | None = None
    sasl_exchange: object | None = None  # a SCRAM exchange between its two round trips
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

    def authorized_operations(self, resource_type: str, name: str) -> int:
        """Kafka's bitfield of the operations the principal may do on the resource (Metadata's
        and DescribeCluster's `authorized_operations`): bit n set for AclOperation code n."""
        return sum(
            1 << code
            for operation, code in AUTHORIZED_OPERATIONS[resource_type].items()
            if self.permits(operation, resource_type, name)
        )

    def permits_on_any(self, operation: str, resource_type: str) -> bool:
        return self.security.allowed_on_any(self.principal, self.host, operation, resource_type)
