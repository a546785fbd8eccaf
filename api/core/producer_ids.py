"""Producer ids and epochs for idempotent and transactional producers, from the shared
allocator (storage_layout/meta/producers.py), opened at the first request: a node whose clients
never ask for one never reads the table."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from storage_layout.meta.producers import ProducerIdAllocator, ProducerIdentity


class ProducerIds:
    def __init__(self, root: str, blocking: Callable[..., Awaitable]) -> None:
        self._root = root
        self._blocking = blocking
        self._allocator: ProducerIdAllocator | None = None

    async def init_producer(
        self, transactional_id: str | None = None, client_id: str | None = None
    ) -> ProducerIdentity:
        """A producer id and epoch (a new epoch of the transactional id's, if one is given)."""
        if self._allocator is None:
            self._allocator = await self._blocking(ProducerIdAllocator, self._root)
        return await self._blocking(self._allocator.init_producer, transactional_id, client_id)
