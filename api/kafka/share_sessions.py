"""Share sessions (KIP-932): a share consumer's ShareFetch and ShareAcknowledge requests to one
node belong to a session of (group, member) with the partitions it fetches from there.

Epoch 0 opens a session (replacing one the member had) with the request's partitions; each
later request carries the epoch the node expects next (1, 2, ...) and adds partitions or
forgets some; epoch -1 closes it after its acknowledgements, and the member's records on its
partitions are released at once. A request for a session this node does not hold gets
SHARE_SESSION_NOT_FOUND, a wrong epoch INVALID_SHARE_SESSION_EPOCH: the consumer opens a new
session. Sessions are this node's, in memory, bounded (least recently used evicted first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

SESSIONS_MAX = 2_000  # Kafka's group.share.max.share.sessions
INITIAL_EPOCH = 0
FINAL_EPOCH = -1

PartitionKey = tuple[str, int]
SessionKey = tuple[str, str]  # (group id, member id)


class ShareSessionError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class ShareSession:
    key: SessionKey
    next_epoch: int
    partitions: dict[PartitionKey, None] = field(default_factory=dict)  # ordered set
    fetches: int = 0  # fetches answered: where the next one starts among the partitions


@dataclass(frozen=True, slots=True)
class SharePlan:
    """What one request does: the session's partitions to fetch from after it (none when it
    closes the session), and whether it closes it."""

    session: ShareSession
    closing: bool


class ShareSessions:
    def __init__(self, sessions_max: int = SESSIONS_MAX) -> None:
        self._sessions: OrderedDict[SessionKey, ShareSession] = OrderedDict()
        self._max = sessions_max

    def plan(
        self,
        key: SessionKey,
        epoch: int,
        added: Iterable[PartitionKey],
        forgotten: Iterable[PartitionKey] = (),
    ) -> SharePlan:
        """The session after a request of `epoch` naming `added` and `forgotten` partitions.

        Raises:
            ShareSessionError: no such session, or not the epoch it expects.
        """
        if epoch == INITIAL_EPOCH:
            session = ShareSession(key, 1, dict.fromkeys(added))
            self._sessions.pop(key, None)
            self._sessions[key] = session
            while len(self._sessions) > self._max:
                self._sessions.popitem(last=False)
            return SharePlan(session, closing=False)
        session = self._sessions.get(key)
        if session is None:
            raise ShareSessionError(
                ErrorCode.share_session_not_found,
                f"No share session of member {key[1]} here: open one with epoch 0.",
            )
        if epoch == FINAL_EPOCH:
            self._sessions.pop(key, None)
            return SharePlan(session, closing=True)
        if epoch != session.next_epoch:
            raise ShareSessionError(
                ErrorCode.invalid_share_session_epoch,
                f"Share session epoch {epoch}; {session.next_epoch} was expected.",
            )
        session.next_epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        session.partitions.update(dict.fromkeys(added))
        for partition in forgotten:  # after the additions: forgetting wins, as in Kafka
            session.partitions.pop(partition, None)
        self._sessions.move_to_end(key)
        return SharePlan(session, closing=False)
