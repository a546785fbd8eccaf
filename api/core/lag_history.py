"""Consumer-group lag over time, sampled on each group's coordinator: the web console's lag
chart (`GET .../consumer-groups/{g}/lag-history`) and the lag metric (its latest sample).

Every `lag_sample_interval_ms` the node looks up, once per partition, the last stable offset of
every partition that a group it coordinates has a committed offset for, and keeps the last
`lag_history_samples` samples per group in memory (bounded: groups x samples x the committed
partitions of each group). A group's history starts again when another
node becomes its coordinator (a history is a chart's worth, not a record).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass

from api.core.broker import Broker
from api.core.group_lag import UNREACHABLE, lag_of, log_end_offsets
from storage_layout.records import TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LagSample:
    """The lag of each committed partition of one group at `time_ms`. `partial`: some
    partition's leader did not answer; its last known lag is carried over (or, never known,
    it is missing), so a dead leader shows as a flat line, not as a dip or a lost history."""

    time_ms: int
    lags: tuple[tuple[TopicPartition, int], ...]
    partial: bool = False

    @property
    def total_lag(self) -> int:
        return sum(lag for _, lag in self.lags)

    @property
    def max_lag(self) -> int:
        return max((lag for _, lag in self.lags), default=0)


class LagHistory:
    def __init__(
        self,
        *,
        interval_ms: int,
        samples_max: int,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.interval_ms = interval_ms
        self._clock_ms = clock_ms  # the samples' wall-clock times
        self._samples_max = samples_max
        self._history: dict[str, deque[LagSample]] = {}

    def samples(self, group_id: str) -> list[LagSample]:
        return list(self._history.get(group_id, ()))

    def current_lags(self) -> list[tuple[str, str, int, int]]:
        """The metrics' lag: the latest sample of each group (a scrape does no I/O; the
        sample is at most one interval old)."""
        return [
            (group_id, tp.topic, tp.partition, lag)
            for group_id, history in sorted(self._history.items())
            if history
            for tp, lag in history[-1].lags
        ]

    async def sample_forever(self, broker: Broker) -> None:
        while True:
            try:
                await self.sample_once(broker)
            except Exception:  # noqa: BLE001 - the next round tries again; serving goes on
                log.warning("consumer lag sample failed", exc_info=True)
            await asyncio.sleep(self.interval_ms / 1000)

    async def sample_once(self, broker: Broker) -> None:
        """One sample of every group coordinated here (one end lookup per partition)."""
        groups = broker.groups
        committed = groups.committed_here() if groups is not None else []
        partitions = sorted({tp for _, tp, _ in committed})
        ends = await log_end_offsets(broker, partitions, skip_unreachable=True)
        end_of = dict(zip(partitions, ends, strict=True))
        offsets: dict[str, dict[TopicPartition, int]] = defaultdict(dict)
        for group_id, tp, offset in committed:
            offsets[group_id][tp] = offset
        for group_id in list(self._history):
            if group_id not in offsets:  # no longer coordinated here, or no offsets left
                del self._history[group_id]
        now_ms = self._clock_ms()
        for group_id, group_offsets in offsets.items():
            history = self._history.setdefault(group_id, deque(maxlen=self._samples_max))
            history.append(_sample(now_ms, group_offsets, end_of, history[-1] if history else None))


def _sample(
    now_ms: int,
    offsets: dict[TopicPartition, int],
    end_of: dict[TopicPartition, int | None],
    previous: LagSample | None,
) -> LagSample:
    """Lags from the ends found; a partition whose leader did not answer keeps its previous
    lag; a partition that is gone (its topic deleted or shrunk) has none."""
    before = dict(previous.lags) if previous is not None else {}
    lags, partial = [], False
    for tp, offset in sorted(offsets.items()):
        end = end_of[tp]
        if end == UNREACHABLE:
            partial = True
            if tp in before:
                lags.append((tp, before[tp]))
        elif end is not None:
            lags.append((tp, lag_of(end, offset)))
    return LagSample(now_ms, tuple(lags), partial)
