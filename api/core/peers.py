"""This node's calls to the other nodes, and what their failures mean here: the one mapping of
a node-to-node failure (storage_layout/cluster/errors.py) to a core error.

- A partition's leader that cannot be reached, or refuses, no longer leads it as far as this
  node knows: NOT_LEADER_OR_FOLLOWER (the client retries; the next route looks again). Its
  verdict on a producer's sequence or epoch comes back unchanged.
- A group's coordinator that fails: NOT_COORDINATOR.
- A transactional id's coordinator that cannot be reached: NOT_COORDINATOR (retriable); its
  refusal comes back as the same error it raised there.

The node adds the headers every call carries (request id, signature) through the client's
hooks (`client`); nothing here knows HTTP beyond paths and statuses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from api.core.errors import (
    ConcurrentTransactions,
    InvalidProducerIdMapping,
    InvalidTransactionTimeout,
    InvalidTxnState,
    NotLeader,
    TransactionalIdNotFound,
    TransactionCoordinatorUnavailable,
)
from api.core.groups.errors import NotCoordinator
from api.core.request_context import REQUEST_ID_HEADER, current_request_id
from storage_layout.cluster import routes
from storage_layout.cluster.client import NodeAnswer, NodeClient
from storage_layout.cluster.codec import producer_error_from
from storage_layout.cluster.errors import NodeCallError, NodeRefused, NodeUnreachable
from storage_layout.errors import ProducerError, ProducerFenced

# The errors a node's refusal names that come back as themselves (by class name).
_TRAVELLING: dict[str, type[Exception]] = {
    error.__name__: error
    for error in (
        InvalidTxnState,
        ConcurrentTransactions,
        InvalidProducerIdMapping,
        InvalidTransactionTimeout,
        TransactionCoordinatorUnavailable,
        TransactionalIdNotFound,
        ProducerFenced,
        *ProducerError.__subclasses__(),
    )
}


def travels(error: Exception) -> bool:
    """Whether the node serving a forwarded request answers `error` as a refusal (the caller
    raises the same error) rather than as a failure."""
    return type(error).__name__ in _TRAVELLING


def request_id_headers(method: str, path: str) -> dict[str, str]:
    """A request this node sends on a client's behalf carries that request's id."""
    request_id = current_request_id()
    return {} if request_id is None else {REQUEST_ID_HEADER: request_id}


class Peers:
    """The calls this node makes to the others (appends and markers to a partition's leader,
    requests to a transaction's or group's coordinator, reads the leader must answer)."""

    def __init__(
        self,
        client: NodeClient,
        *,
        is_alive: Callable[[int], bool],
        forget_leader: Callable[[str, int], None],
        liveness_check_ms: int,
    ) -> None:
        self.client = client
        self._is_alive = is_alive
        self._forget_leader = forget_leader
        self._liveness_check_ms = liveness_check_ms

    # ---- a partition's leader ---------------------------------------------------------------

    async def to_leader(
        self, url: str, leader_id: int | None, topic: str, partition: int, path: str, body: dict
    ) -> dict:
        """POST `body` to the partition leader's node-to-node `path`; its answer.

        Raises:
            NotLeader: the leader is unreachable, refused (it no longer leads), or stopped
                renewing its lease while the request was out: retry.
            ProducerError: the leader's verdict on the producer's sequence or epoch, unchanged.
        """
        post = self.client.post_json(url, path, body)
        try:
            return await self._while_alive(post, leader_id, topic, partition)
        except NodeUnreachable as error:
            self._forget_leader(topic, partition)
            raise NotLeader(
                f"The leader of {topic}/{partition} at {url} is unreachable "
                f"({error.reason}); retry."
            ) from None
        except NodeRefused as refused:
            verdict = producer_error_from(refused.refusal)
            if verdict is not None:
                raise verdict from None
            self._forget_leader(topic, partition)
            message = f"The leader of {topic}/{partition} refused: {refused.detail}"
            raise NotLeader(message) from None

    async def _while_alive(
        self, request: Awaitable, node_id: int | None, topic: str, partition: int
    ):
        """The forwarded request's answer, unless the node it went to stops renewing its
        lease first (paused, cut off): then this node may take the partition, so waiting out
        `forward_timeout_ms` (30 s) only delayed the client's retry (chaos T2: recovery p50 was
        the client's own timeout). Either way the outcome is unknown to the client, as after
        a timeout; an idempotent producer's retry is safe, and a stale leader is fenced."""
        pending = asyncio.ensure_future(request)
        check_s = self._liveness_check_ms / 1000
        while True:
            done, _ = await asyncio.wait({pending}, timeout=check_s)
            if done:
                return pending.result()
            if node_id is not None and not self._is_alive(node_id):
                pending.cancel()
                self._forget_leader(topic, partition)
                raise NotLeader(
                    f"Node {node_id}, leader of {topic}/{partition}, stopped renewing its lease "
                    f"while an append was forwarded to it; whether it was written is unknown "
                    f"(an idempotent producer's retry is safe); retry."
                )

    async def read_from_leader(
        self, url: str, path: str, *, params: Mapping | None = None, headers: Mapping = {}
    ) -> NodeAnswer:
        """GET a public read route on the partition's leader (a read only it can answer);
        its answer whatever the status.

        Raises:
            NotLeader: the leader is unreachable: retry shortly.
        """
        try:
            return await self.client.call("GET", url, path, params=params, headers=headers)
        except NodeUnreachable as error:
            raise NotLeader(
                f"The partition's leader at {url} is unreachable ({error.reason}); retry shortly."
            ) from None

    # ---- coordinators -----------------------------------------------------------------------

    async def to_transaction_coordinator(
        self, url: str, transactional_id: str, operation: str, body: dict
    ) -> dict:
        """A transactional request run at the id's coordinator; its answer.

        Raises:
            TransactionCoordinatorUnavailable: it could not be reached (retriable).
            TransactionError, ProducerFenced: its refusal, as raised there.
        """
        try:
            return await self.client.post_json(url, routes.transaction_path(operation), body)
        except NodeUnreachable as error:
            raise TransactionCoordinatorUnavailable(
                f"The coordinator of transactional id {transactional_id!r} at {url} is "
                f"unreachable ({error.reason}); retry."
            ) from None
        except NodeRefused as refused:
            raise _refusal_error(refused.refusal) from None

    async def to_group_coordinator(self, url: str, group_id: str, path: str, body: dict) -> dict:
        """POST `body` to the group coordinator's node-to-node `path`; its answer.

        Raises:
            NotCoordinator: it could not be reached or refused.
        """
        try:
            return await self.client.post_json(url, path, body)
        except NodeUnreachable as error:
            raise NotCoordinator(f"The coordinator of group {group_id!r}: {error}") from None
        except NodeRefused as refused:
            raise NotCoordinator(
                f"The coordinator of group {group_id!r} refused: {refused.detail}"
            ) from None

    async def forward_to_group_coordinator(self, url: str, method: str, path: str, **request):
        """A client's group request sent on unchanged to the group's coordinator; its answer
        whatever the status.

        Raises:
            NotCoordinator: it could not be reached: retry shortly.
        """
        try:
            return await self.client.call(method, url, path, **request)
        except NodeUnreachable as error:
            raise NotCoordinator(
                f"The group's coordinator at {url} is unreachable ({error.reason}); retry shortly."
            ) from None

    async def coordinated_groups(self, url: str, *, timeout_ms: int) -> list[dict]:
        """The groups the node at `url` coordinates (summaries); none if it does not answer
        (a node that just died: its groups reappear once another node takes them)."""
        try:
            answer = await self.client.get_json(url, routes.GROUPS_PATH, timeout_ms=timeout_ms)
        except NodeCallError:
            return []
        return answer["groups"]


def _refusal_error(refusal: dict) -> Exception:
    """The error a refusal names (retriable ConcurrentTransactions if it names none known)."""
    error = _TRAVELLING.get(refusal.get("error"), ConcurrentTransactions)
    return error(refusal.get("message") or "The transaction's coordinator refused; retry.")
