"""What a handler knows of the connection a request came on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

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


PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Turn:
    """One produce batch's place in its partition's order on one connection."""

    key: PartitionKey
    previous: asyncio.Future | None  # done once the connection's earlier batch is queued
    mine: asyncio.Future


class PartitionTurns:
    """A connection's produce batches are queued in order per partition, as a Kafka producer
    needs, and only per partition: a later request's batch for another partition need not
    wait. librdkafka sends one partition per request, so a partition's first produce (which
    takes the partition: on an object store several requests) would otherwise hold up every
    other partition's behind it on the connection."""

    def __init__(self) -> None:
        self._last: dict[PartitionKey, asyncio.Future] = {}

    def take(self, key: PartitionKey) -> Turn:
        mine = asyncio.get_running_loop().create_future()
        turn = Turn(key, self._last.get(key), mine)
        self._last[key] = mine
        return turn

    def done(self, turn: Turn) -> None:
        """The batch is queued (or refused): the partition's next batch may go."""
        if not turn.mine.done():
            turn.mine.set_result(None)
        if self._last.get(turn.key) is turn.mine:
            del self._last[turn.key]


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
    # Let the connection start its next request (api/kafka/listener.py): a produce calls
    # `reserve` once its batches hold their turns (the next produce may start) and `admit`
    # once they are queued at their partitions (any request may start).
    reserve: Callable[[], None] = _nothing
    admit: Callable[[], None] = _nothing
    turns: PartitionTurns = field(default_factory=PartitionTurns)

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
