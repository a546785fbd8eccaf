"""This node's membership of the cluster while it runs: its liveness record renewed every
`heartbeat_ms`, and (in a task of its own, so a long round over many partitions never delays a
renewal) partition leadership kept where it belongs (api/core/leaders.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from api.core.cluster import Cluster
from api.core.leaders import Leaders
from api.core.topics import Topics

log = logging.getLogger("lakelog.membership")


class Membership:
    """Renewals and leadership rounds until close()."""

    def __init__(
        self,
        *,
        cluster: Cluster,
        leaders: Leaders,
        topics: Topics,
        heartbeat_ms: int,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._cluster = cluster
        self._leaders = leaders
        self._topics = topics
        self._interval_s = heartbeat_ms / 1000
        self._sleep = sleep
        # Renewals on a thread of their own: queued behind partition opens (a node taking a
        # thousand partitions at start), a renewal came late enough for the node to stop
        # leading (can_lead) and answer 503s.
        self._heartbeats = ThreadPoolExecutor(1, thread_name_prefix="lakelog-heartbeat")
        self._tasks: list[asyncio.Task] = []
        self._closing = False

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._renew_forever()),
            loop.create_task(self._keep_leadership_forever()),
        ]

    async def close(self) -> None:
        self._closing = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._heartbeats.shutdown(wait=True)

    async def _renew_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing:
            try:
                await loop.run_in_executor(self._heartbeats, self._cluster.heartbeat)
            except asyncio.CancelledError:
                raise
            except Exception:  # keep renewing: one failed round must not stop the node
                log.exception("liveness renewal failed")
            await self._sleep(self._interval_s)

    async def _keep_leadership_forever(self) -> None:
        while not self._closing:
            try:
                topics = self._topics.cached().values()
                keys = [(t.name, p) for t in topics for p in range(t.partitions)]
                await self._leaders.maintain(keys)
            except asyncio.CancelledError:
                raise
            except Exception:  # one failed round must not stop the next
                log.exception("cluster maintenance round failed")
            await self._sleep(self._interval_s)
