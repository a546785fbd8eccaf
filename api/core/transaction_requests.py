"""A transactional producer's requests from any node: each runs at the transactional id's
coordinator (api/core/transactions.py), here or forwarded there over one internal route.

Kafka clients find the coordinator themselves (FindCoordinator) and talk to it; HTTP clients,
a gateway adding a partition for a transactional produce, and a group's coordinator keeping
offsets sent within a transaction do not know it, and come through here. A refusal forwarded
back is the same error as at the coordinator (api/core/peers.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from api.core.errors import TransactionCoordinatorUnavailable
from api.core.peers import Peers
from api.core.transactions import TransactionCoordinator
from storage_layout.meta.producers import ProducerIdentity
from storage_layout.meta.transaction_state import PendingOffset, TxnState, pending_offset_from
from storage_layout.records import TopicPartition


class TransactionRequests:
    """The coordinator's operations, wherever it runs."""

    def __init__(
        self,
        coordinator: TransactionCoordinator,
        *,
        node_id: int,
        node_url: Callable[[int], str | None],
        peers: Peers,
    ) -> None:
        self._coordinator = coordinator
        self._node_id = node_id
        self._node_url = node_url
        self._peers = peers

    async def init_producer(self, transactional_id: str, timeout_ms: int) -> ProducerIdentity:
        """InitProducerId: a new epoch for the id (fencing older producers of it)."""
        body = await self._call(transactional_id, "init_producer", {"timeout_ms": timeout_ms})
        return ProducerIdentity(body["producer_id"], body["producer_epoch"])

    async def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Sequence
    ) -> None:
        """AddPartitionsToTxn: the partitions the transaction writes to, before it does."""
        arguments = _producer(producer_id, epoch)
        arguments["partitions"] = [[p.topic, p.partition] for p in partitions]
        await self._call(transactional_id, "add_partitions", arguments)

    async def add_group(
        self, transactional_id: str, producer_id: int, epoch: int, group_id: str
    ) -> None:
        """AddOffsetsToTxn: the transaction commits offsets of `group_id`."""
        arguments = _producer(producer_id, epoch) | {"group_id": group_id}
        await self._call(transactional_id, "add_group", arguments)

    async def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        offsets: Sequence[PendingOffset],
    ) -> None:
        """TxnOffsetCommit's offsets, committed to their group when the transaction commits."""
        arguments = _producer(producer_id, epoch)
        arguments["offsets"] = [dataclasses.asdict(offset) for offset in offsets]
        await self._call(transactional_id, "add_offsets", arguments)

    async def end(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> ProducerIdentity:
        """Commit or abort with a bumped epoch (TransactionCoordinator.end's `bump_epoch`);
        returns once markers and offsets are written, with the next transaction's id."""
        arguments = _producer(producer_id, epoch) | {"commit": commit}
        body = await self._call(transactional_id, "end", arguments)
        return ProducerIdentity(body["producer_id"], body["producer_epoch"])

    async def describe(self, transactional_id: str) -> dict:
        """The id's state as JSON (v3 shape, `kind` KafkaTransaction)."""
        return await self._call(transactional_id, "describe", {})

    async def serve(self, operation: str, body: dict) -> dict:
        """Run a forwarded request here (the internal route's side)."""
        coordinator = self._coordinator
        transactional_id = body["transactional_id"]
        if operation == "describe":
            return _state_json(await coordinator.describe(transactional_id))
        if operation == "init_producer":
            identity = await coordinator.init_producer(transactional_id, body["timeout_ms"])
            return {"producer_id": identity.producer_id, "producer_epoch": identity.producer_epoch}
        producer = (transactional_id, body["producer_id"], body["epoch"])
        if operation == "add_partitions":
            partitions = [TopicPartition(topic, p) for topic, p in body["partitions"]]
            await coordinator.add_partitions(*producer, partitions)
        elif operation == "add_group":
            await coordinator.add_group(*producer, body["group_id"])
        elif operation == "add_offsets":
            offsets = [pending_offset_from(offset) for offset in body["offsets"]]
            await coordinator.add_offsets(*producer, offsets)
        elif operation == "end":
            identity = await coordinator.end(*producer, body["commit"], bump_epoch=True)
            return {"producer_id": identity.producer_id, "producer_epoch": identity.producer_epoch}
        else:
            raise ValueError(f"unknown transaction operation {operation!r}")
        return {}

    async def _call(self, transactional_id: str, operation: str, arguments: dict) -> dict:
        body = {"transactional_id": transactional_id, **arguments}
        node = self._coordinator.coordinator_of(transactional_id)
        if node == self._node_id:
            return await self.serve(operation, body)
        url = None if node is None else self._node_url(node)
        if url is None:
            raise TransactionCoordinatorUnavailable(
                f"The coordinator of transactional id {transactional_id!r} (node {node}) is not "
                "reachable yet; retry."
            )
        return await self._peers.to_transaction_coordinator(url, transactional_id, operation, body)


def _state_json(state: TxnState) -> dict:
    return {
        "kind": "KafkaTransaction",
        "transactional_id": state.transactional_id,
        "producer_id": state.producer_id,
        "producer_epoch": state.producer_epoch,
        "state": state.status.value,
        "transaction_timeout_ms": state.timeout_ms,
        "transaction_start_ms": state.started_ms or None,
        "topic_partitions": [
            {"topic_name": p.topic, "partition_id": p.partition} for p in state.partitions
        ],
        "consumer_group_ids": list(state.groups),
    }


def _producer(producer_id: int, epoch: int) -> dict:
    return {"producer_id": producer_id, "epoch": epoch}
