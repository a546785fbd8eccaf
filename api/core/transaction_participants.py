"""What a transaction's coordinator asks of the others taking part (FORMAT.md §14, §15): each
partition's leader writes the transaction's marker, each group's coordinator commits (or
drops) the offsets sent within it. Here when this node is that leader or coordinator, else
forwarded there through the node-to-node protocol (api/core/peers.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from api.core.errors import NotLeader
from api.core.leaders import Leaders
from api.core.peers import Peers
from api.core.writer import TransactionMarker
from storage_layout.cluster import routes
from storage_layout.meta.consumer_offsets import OffsetCommit


class TransactionParticipants:
    """The partitions' leaders and the groups' coordinators, as a transaction sees them."""

    def __init__(self, *, leaders: Leaders, peers: Peers, groups) -> None:
        self._leaders = leaders
        self._peers = peers
        self._groups = groups  # GroupCoordinator

    async def write_marker(
        self, topic: str, partition: int, marker: TransactionMarker, *, forward: bool = True
    ) -> None:
        """Write a transaction marker at the partition's leader: here, or forwarded to it
        (`forward`).

        Raises:
            NotLeader: the leader could not be reached (the coordinator tries again later).
            ProducerFenced: the partition has seen a newer epoch of the producer.
        """
        route = await self._leaders.route(topic, partition)
        if route.writer is not None:
            await route.writer.submit_marker(marker)
            return
        if not forward or route.url is None:
            raise NotLeader(f"Node {route.leader_id} leads {topic}/{partition}.")
        path = routes.marker_path(topic, partition)
        body = dataclasses.asdict(marker)
        await self._peers.to_leader(route.url, route.leader_id, topic, partition, path, body)

    async def commit_offsets(
        self, group_id: str, commits: Sequence[OffsetCommit], producer_id: int
    ) -> None:
        """An ended transaction's offsets (none if it aborted) at the group's coordinator,
        here or forwarded: committed, and the group's offsets of the producer stable again."""
        url = self._groups.remote_url(group_id)
        if url is None:
            await self.end_offsets(group_id, commits, producer_id)
            return
        path = routes.transaction_offsets_path(group_id)
        body = {
            "producer_id": producer_id,
            "offsets": [dataclasses.asdict(commit) for commit in commits],
        }
        await self._peers.to_group_coordinator(url, group_id, path, body)

    async def end_offsets(
        self, group_id: str, commits: Sequence[OffsetCommit], producer_id: int
    ) -> None:
        """The group's side of a transaction's end, at its coordinator (this node)."""
        if commits:
            await self._groups.commit_transactional(group_id, commits)
        await self._groups.end_transactional(group_id, producer_id)
