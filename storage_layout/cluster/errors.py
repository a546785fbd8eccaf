"""Why a call to another node failed: it could not be reached, or it refused. Callers above
turn these into what the failure means for their request (api/core/peers.py: a leader that is
gone is NOT_LEADER_OR_FOLLOWER, a coordinator that is gone is NOT_COORDINATOR)."""

from __future__ import annotations

from storage_layout.errors import StorageError


class NodeCallError(StorageError):
    """A node-to-node call did not get an answer of success. It never reaches a client as
    itself (api/core/peers.py turns it into what it means); were it to, it is retriable, which
    Kafka's protocol answers NOT_LEADER_OR_FOLLOWER (clients look for the leader again)."""

    retriable = True

    def __init__(self, message: str, *, url: str) -> None:
        super().__init__(message)
        self.url = url


class NodeUnreachable(NodeCallError):
    """No answer: refused connection, timeout, reset (the node stopped or is cut off).
    `reason` names what happened (the transport error's name, e.g. ConnectError)."""

    def __init__(self, *, url: str, reason: str) -> None:
        super().__init__(f"{url} is unreachable ({reason})", url=url)
        self.reason = reason


class NodeRefused(NodeCallError):
    """The node answered with an error status. `refusal` is its error body (codec.refusal),
    empty if the answer was not one; `detail` its message, or the answer's first characters."""

    def __init__(self, *, url: str, status: int, refusal: dict, detail: str) -> None:
        super().__init__(f"{url} answered {status}: {detail}", url=url)
        self.status = status
        self.refusal = refusal
        self.detail = detail

    @property
    def error_name(self) -> str | None:
        """The class name of the error the other node raised, if it said."""
        return self.refusal.get("error")
