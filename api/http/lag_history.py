"""Consumer-group lag over time, sampled on each group's coordinator: the web console's lag
chart (`GET .../consumer-groups/{g}/lag-history`) and the metrics' lag for partitions whose end
this node does not know without asking (neither led nor read here).

Every `lag_sample_interval_ms` the node looks up, once per partition, the last stable offset of
every partition that a group it coordinates has a committed offset for, and keeps the last
`lag_history_samples` samples per group in memory. A group's history starts again when another
node becomes its coordinator (a history is a chart's worth, not a record).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from api.core.broker import Broker
from api.http.group_lag import log_end_offsets
from storage_layout.records import TopicPartition

log = logging.getLogger(__name__)

GroupLags = Iterable[tuple[str, str, int, int]]  # (group, topic, partition, lag)


@dataclass(frozen=True, slots=True)
class LagSample:
    """The lag of each committed partition of one group at `time_ms`."""

    time_ms: int
    lags: tuple[tuple[TopicPartition, int], ...]

    @property
    def total_lag(self) -> int:
        return sum(lag for _, lag in self.lags)

    @property
    def max_lag(self) -> int:
        return max((lag for _, lag in self.lags), default=0)


class LagHistory:
    def __init__(
        self,
        broker: Broker,
        *,
        interval_ms: int,
        samples_max: int,
        known_here: Callable[[], GroupLags] = lambda: (),
    ) -> None:
        self.interval_ms = interval_ms
        self._broker = broker
        self._samples_max = samples_max
        self._known_here = known_here
        self._history: dict[str, deque[LagSample]] = {}

    def samples(self, group_id: str) -> list[LagSample]:
        return list(self._history.get(group_id, ()))

    def current_lags(self) -> list[tuple[str, str, int, int]]:
        """The metrics' lag: the latest sample of each group, overlaid by the lags this node
        knows without I/O (partitions it leads or follows: fresher than the sample)."""
        lags = {
            (group_id, tp.topic, tp.partition): lag
            for group_id, history in self._history.items()
            if history
            for tp, lag in history[-1].lags
        }
        for group_id, topic, partition, lag in self._known_here():
            lags[(group_id, topic, partition)] = lag
        return [(*key, lag) for key, lag in sorted(lags.items())]

    async def sample_forever(self) -> None:
        while True:
            try:
                await self.sample_once()
            except Exception:  # noqa: BLE001 - the next round tries again; serving goes on
                log.warning("consumer lag sample failed", exc_info=True)
            await asyncio.sleep(self.interval_ms / 1000)

    async def sample_once(self) -> None:
        """One sample of every group coordinated here (one end lookup per partition)."""
        groups = self._broker.groups
        committed = groups.committed_here() if groups is not None else []
        partitions = sorted({tp for _, tp, _ in committed})
        ends = await log_end_offsets(self._broker, partitions, skip_unreachable=True)
        end_of = dict(zip(partitions, ends, strict=True))
        lags: dict[str, list[tuple[TopicPartition, int]]] = defaultdict(list)
        for group_id, tp, offset in committed:
            end = end_of[tp]
            if end is not None:
                lags[group_id].append((tp, max(0, end - offset)))
        now_ms = int(time.time() * 1000)
        for group_id in list(self._history):
            if group_id not in lags:  # no longer coordinated here, or deleted
                del self._history[group_id]
        for group_id, group_lags in lags.items():
            history = self._history.setdefault(group_id, deque(maxlen=self._samples_max))
            history.append(LagSample(now_ms, tuple(sorted(group_lags))))
