"""The one place where errors become Kafka error codes (the HTTP front-end has its own table in
api/http/errors.py). The first matching base class wins; an unknown error is
UNKNOWN_SERVER_ERROR, or NOT_LEADER_OR_FOLLOWER when it says it is retriable (clients then
refresh their metadata and retry, as after a leader change)."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from api.core.errors import (
    BrokerShuttingDown,
    ConcurrentTransactions,
    InvalidProducerIdMapping,
    InvalidProducerRequest,
    InvalidRequest,
    InvalidTransactionTimeout,
    InvalidTxnState,
    KeyRequired,
    NotLeader,
    RecordTooLarge,
    TransactionCoordinatorUnavailable,
)
from api.core.groups.errors import (
    FencedInstanceId,
    GroupNotFound,
    GroupSubscribedToTopic,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidGroupRequest,
    NonEmptyGroup,
    NotCoordinator,
    RebalanceInProgress,
    UnknownMemberId,
)
from api.kafka.codec import CorruptBatch, UnsupportedCodec
from api.security.errors import AuthenticationFailed, AuthorizationFailed, QuotaExceeded
from storage_layout.errors import (
    AppendConflict,
    DuplicateSequence,
    InvalidConfig,
    InvalidPartitions,
    InvalidTopic,
    OffsetOutOfRange,
    OutOfOrderSequence,
    PartitionNotFound,
    PartitionTableMissing,
    ProducerFenced,
    StorageUnavailable,
    TopicExists,
    TopicNotFound,
    UnknownProducerId,
)

log = logging.getLogger("lakelog.kafka")

ERROR_CODES: dict[type[Exception], ErrorCode] = {
    TopicNotFound: ErrorCode.unknown_topic_or_partition,
    PartitionNotFound: ErrorCode.unknown_topic_or_partition,
    PartitionTableMissing: ErrorCode.leader_not_available,  # a topic being created (retriable)
    NotLeader: ErrorCode.not_leader_or_follower,
    BrokerShuttingDown: ErrorCode.not_leader_or_follower,
    AppendConflict: ErrorCode.not_leader_or_follower,
    StorageUnavailable: ErrorCode.kafka_storage_error,
    OffsetOutOfRange: ErrorCode.offset_out_of_range,
    RecordTooLarge: ErrorCode.message_too_large,
    KeyRequired: ErrorCode.invalid_record,
    InvalidTxnState: ErrorCode.invalid_txn_state,
    ConcurrentTransactions: ErrorCode.concurrent_transactions,
    InvalidProducerIdMapping: ErrorCode.invalid_producer_id_mapping,
    InvalidTransactionTimeout: ErrorCode.invalid_transaction_timeout,
    TransactionCoordinatorUnavailable: ErrorCode.not_coordinator,
    CorruptBatch: ErrorCode.corrupt_message,
    UnsupportedCodec: ErrorCode.unsupported_compression_type,
    OutOfOrderSequence: ErrorCode.out_of_order_sequence_number,
    DuplicateSequence: ErrorCode.duplicate_sequence_number,
    ProducerFenced: ErrorCode.invalid_producer_epoch,
    UnknownProducerId: ErrorCode.unknown_producer_id,
    InvalidProducerRequest: ErrorCode.invalid_request,
    TopicExists: ErrorCode.topic_already_exists,
    InvalidTopic: ErrorCode.invalid_topic_exception,
    InvalidConfig: ErrorCode.invalid_config,
    InvalidPartitions: ErrorCode.invalid_partitions,
    InvalidRequest: ErrorCode.invalid_request,
    UnknownMemberId: ErrorCode.unknown_member_id,
    IllegalGeneration: ErrorCode.illegal_generation,
    RebalanceInProgress: ErrorCode.rebalance_in_progress,
    FencedInstanceId: ErrorCode.fenced_instance_id,
    InconsistentGroupProtocol: ErrorCode.inconsistent_group_protocol,
    NonEmptyGroup: ErrorCode.non_empty_group,
    GroupNotFound: ErrorCode.group_id_not_found,
    GroupSubscribedToTopic: ErrorCode.group_subscribed_to_topic,
    NotCoordinator: ErrorCode.not_coordinator,
    InvalidGroupRequest: ErrorCode.invalid_request,
    AuthenticationFailed: ErrorCode.sasl_authentication_failed,
    AuthorizationFailed: ErrorCode.topic_authorization_failed,
    QuotaExceeded: ErrorCode.throttling_quota_exceeded,
}


AUTHORIZATION_CODES = {
    "topic": ErrorCode.topic_authorization_failed,
    "group": ErrorCode.group_authorization_failed,
    "cluster": ErrorCode.cluster_authorization_failed,
    "transactional_id": ErrorCode.transactional_id_authorization_failed,
}


def error_code(error: BaseException) -> ErrorCode:
    if isinstance(error, AuthorizationFailed) and error.resource_type in AUTHORIZATION_CODES:
        return AUTHORIZATION_CODES[error.resource_type]
    for error_type, code in ERROR_CODES.items():
        if isinstance(error, error_type):
            return code
    if getattr(error, "retriable", False):
        return ErrorCode.not_leader_or_follower
    log.warning("unexpected %s answered UNKNOWN_SERVER_ERROR: %s", type(error).__name__, error)
    return ErrorCode.unknown_server_error


def error_message(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"[:1000]
