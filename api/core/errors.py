"""Broker errors: one tree, stable codes. Storage errors pass through unchanged; both trees are
mapped to HTTP in one place (api/http/errors.py). `code` is the Kafka error name where Kafka has
one (the Kafka front-end derives its answer from it), as in storage_layout/errors.py."""

from __future__ import annotations


class BrokerError(Exception):
    code = "BROKER_ERROR"
    retriable = False


class RecordTooLarge(BrokerError):
    """A record is larger than the topic's max.message.bytes."""

    code = "MESSAGE_TOO_LARGE"

    def __init__(self, *, index: int, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(
            f"Record {index} is {size_bytes} bytes (key + value + headers), more than the topic's "
            f"max.message.bytes={limit_bytes}. Split the record or raise max.message.bytes."
        )
        self.index = index


class KeyRequired(BrokerError):
    """A record without a key sent to a compacted topic (Kafka's INVALID_RECORD)."""

    code = "INVALID_RECORD"

    def __init__(self, *, topic: str, indexes: tuple[int, ...]) -> None:
        which = (
            f"Record {indexes[0]} has" if len(indexes) == 1 else f"Records {_listed(indexes)} have"
        )
        super().__init__(
            f"{which} no key, and topic {topic!r} is compacted "
            "(cleanup.policy=compact keeps the latest record per key): give every record a key."
        )
        self.indexes = indexes  # every record without a key, in order
        self.index = indexes[0]


def _listed(indexes: tuple[int, ...], shown_max: int = 5) -> str:
    shown = ", ".join(str(i) for i in indexes[:shown_max])
    return shown if len(indexes) <= shown_max else f"{shown}, ... ({len(indexes)} in all)"


class InvalidRequest(BrokerError):
    """The request is well-formed JSON but asks for something impossible (e.g. bad offset)."""

    code = "INVALID_REQUEST"


class InvalidReplicaAssignment(BrokerError):
    """A CreateTopics replica assignment Kafka would refuse (partitions out of order, an empty
    or repeating replica list)."""

    code = "INVALID_REPLICA_ASSIGNMENT"


class NotLeader(BrokerError):
    """This node does not lead the partition (and could not forward to the node that does)."""

    code = "NOT_LEADER_OR_FOLLOWER"
    retriable = True

    def __init__(self, message: str, *, leader_id: int | None = None) -> None:
        super().__init__(message)
        self.leader_id = leader_id


class FencedLeaderEpoch(BrokerError):
    """The request names a leader epoch older than the partition's: the client's metadata is
    stale (it refreshes it and retries)."""

    code = "FENCED_LEADER_EPOCH"
    retriable = True


class UnknownLeaderEpoch(BrokerError):
    """The request names a leader epoch newer than this node has seen: its view lags (retry)."""

    code = "UNKNOWN_LEADER_EPOCH"
    retriable = True


def check_leader_epoch(requested: int, current: int) -> None:
    """Kafka's rule for a request's current_leader_epoch (-1: not checked).

    Raises:
        FencedLeaderEpoch: older than `current`. UnknownLeaderEpoch: newer.
    """
    if requested < 0 or current < 0 or requested == current:
        return
    if requested < current:
        raise FencedLeaderEpoch(f"Leader epoch {requested} is older than the current {current}.")
    raise UnknownLeaderEpoch(f"Leader epoch {requested} is newer than the known {current}.")


class BrokerShuttingDown(BrokerError):
    code = "NOT_LEADER_OR_FOLLOWER"  # clients retry it at once, as after a leader change
    retriable = True


class InvalidProducerRequest(BrokerError):
    """Producer fields of a produce request are malformed or incomplete (e.g. a partition that
    receives records has no base sequence)."""

    code = "INVALID_REQUEST"


# ---- transactions (Kafka's error names) ------------------------------------------------------


class TransactionError(BrokerError):
    """A transactional request broke the transaction protocol."""


class InvalidTxnState(TransactionError):
    """The request does not fit the transaction's state (e.g. committing an aborted one)."""

    code = "INVALID_TXN_STATE"


class ConcurrentTransactions(TransactionError):
    """The transaction is being completed (or changed by another coordinator); retry."""

    code = "CONCURRENT_TRANSACTIONS"
    retriable = True


class InvalidProducerIdMapping(TransactionError):
    """The producer id is not the one the transactional id was initialised with."""

    code = "INVALID_PRODUCER_ID_MAPPING"


class InvalidTransactionTimeout(TransactionError):
    """transaction.timeout.ms outside 1 .. the coordinator's maximum."""

    code = "INVALID_TRANSACTION_TIMEOUT"


class TransactionalIdNotFound(TransactionError):
    """No producer was ever initialised with the transactional id."""

    code = "TRANSACTIONAL_ID_NOT_FOUND"


class TransactionCoordinatorUnavailable(TransactionError):
    """This node does not coordinate the transactional id; find the coordinator again."""

    code = "NOT_COORDINATOR"
    retriable = True
