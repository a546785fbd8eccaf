"""Incremental fetch sessions (Kafka's KIP-227): a consumer that fetches many partitions sends
them in full once; later requests name only the partitions whose fetch offset changed (and the
ones to forget), and answers carry only the partitions with records, an error, or new bounds.

Request shapes, by (session id, epoch): (0, -1) a full fetch without a session; (0, 0) a full
fetch that opens one; (id, n > 0) an incremental fetch of session `id`, whose epoch must be
the one expected; (id, 0) closes `id` and opens a new one; (id, -1) closes `id` and fetches in
full. The cache is this node's, bounded (least recently used sessions are evicted: their next
incremental fetch gets FETCH_SESSION_ID_NOT_FOUND and the client starts over with a full one).
"""

from __future__ import annotations

import itertools
import random
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

SESSIONS_MAX = 1000  # Kafka's max.incremental.fetch.session.cache.slots
NO_SESSION = 0
FINAL_EPOCH = -1
INITIAL_EPOCH = 0

PartitionKey = tuple[str, int]


class FetchSessionError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class _Partition:
    fetch_offset: int
    max_bytes: int
    leader_epoch: int = -1  # the client's current_leader_epoch (-1: not checked)
    sent_bounds: tuple[int, int] | None = None  # (high watermark, log start) last answered


@dataclass(slots=True)
class FetchSession:
    session_id: int
    next_epoch: int
    partitions: dict[PartitionKey, _Partition] = field(default_factory=dict)

    def wanted(self) -> list[tuple[str, int, int, int, int]]:
        return [
            (t, p, s.fetch_offset, s.max_bytes, s.leader_epoch)
            for (t, p), s in self.partitions.items()
        ]

    def worth_answering(self, key: PartitionKey, answer: dict) -> bool:
        """An incremental answer carries a partition with records, an error or new bounds."""
        state = self.partitions[key]
        bounds = (answer["high_watermark"], answer["log_start_offset"])
        return (
            bool(answer.get("records")) or answer["error_code"] != 0 or state.sent_bounds != bounds
        )

    def answered(self, key: PartitionKey, answer: dict) -> None:
        self.partitions[key].sent_bounds = (answer["high_watermark"], answer["log_start_offset"])


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """What one Fetch request reads, and the session it belongs to (None: sessionless)."""

    # topic, partition, fetch offset, max bytes, current leader epoch
    wanted: list[tuple[str, int, int, int, int]]
    session: FetchSession | None
    incremental: bool


class FetchSessions:
    """This node's fetch sessions."""

    def __init__(self, sessions_max: int = SESSIONS_MAX) -> None:
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._sessions_max = sessions_max
        self._ids = itertools.count(random.Random(time.time_ns()).randrange(1, 1 << 30))

    def plan(self, request) -> FetchPlan:
        """Raises FetchSessionError (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH)."""
        session_id, epoch = request.session_id, request.session_epoch
        listed = _listed(request)
        if session_id != NO_SESSION and epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            self._sessions.pop(session_id, None)  # closed by the client
        if epoch == FINAL_EPOCH:
            return FetchPlan([(*key, *value) for key, value in listed.items()], None, False)
        if epoch == INITIAL_EPOCH:
            session = self._open(listed)
            return FetchPlan(session.wanted(), session, False)
        session = self._continued(session_id, epoch)
        for key in _forgotten(request):
            session.partitions.pop(key, None)
        for key, (offset, max_bytes, leader_epoch) in listed.items():
            known = session.partitions.get(key)
            if known is None:
                session.partitions[key] = _Partition(offset, max_bytes, leader_epoch)
            else:
                known.fetch_offset, known.max_bytes = offset, max_bytes
                known.leader_epoch = leader_epoch
        return FetchPlan(session.wanted(), session, True)

    def advance(self, session: FetchSession, answers: dict[PartitionKey, dict]) -> None:
        """After an answer: the next fetch offsets are the client's to send; remember bounds."""
        for key, answer in answers.items():
            session.answered(key, answer)
        session.next_epoch += 1

    def _open(self, listed: dict[PartitionKey, tuple[int, int, int]]) -> FetchSession:
        while len(self._sessions) >= self._sessions_max:
            self._sessions.popitem(last=False)  # the least recently used
        session_id = next(self._ids) % (1 << 31) or next(self._ids)
        session = FetchSession(
            session_id,
            INITIAL_EPOCH,  # advance() makes it 1 once the opening answer is sent
            {key: _Partition(*wanted) for key, wanted in listed.items()},
        )
        self._sessions[session_id] = session
        return session

    def _continued(self, session_id: int, epoch: int) -> FetchSession:
        session = self._sessions.get(session_id)
        if session is None:
            raise FetchSessionError(
                ErrorCode.fetch_session_id_not_found,
                f"Fetch session {session_id} is not (or no longer) cached here.",
            )
        if epoch != session.next_epoch:
            raise FetchSessionError(
                ErrorCode.invalid_fetch_session_epoch,
                f"Fetch session {session_id} expects epoch {session.next_epoch}, not {epoch}.",
            )
        self._sessions.move_to_end(session_id)
        return session


def _listed(request) -> dict[PartitionKey, tuple[int, int, int]]:
    return {
        (topic.topic, p.partition): (
            p.fetch_offset,
            p.partition_max_bytes,
            getattr(p, "current_leader_epoch", -1),  # v9+
        )
        for topic in request.topics
        for p in topic.partitions
    }


def _forgotten(request) -> list[PartitionKey]:
    return [
        (topic.topic, partition)
        for topic in request.forgotten_topics_data
        for partition in topic.partitions
    ]
