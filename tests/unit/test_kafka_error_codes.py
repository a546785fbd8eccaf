"""Each error carries its Kafka name once (`code`), and the Kafka front-end derives its code
from it: for every error class of the trees, the derived code is the one the front-end's own
table gave before the names moved into the classes (that table, frozen here)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

import storage_layout.cluster.errors  # noqa: F401 - its errors are in the tree too
from api.core.errors import (
    BrokerError,
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
from api.kafka.errors import AUTHORIZATION_CODES, error_code, kafka_code_of
from api.security.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    QuotaExceeded,
    SecurityError,
)
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
    StorageError,
    StorageUnavailable,
    TopicExists,
    TopicNotFound,
    UnknownProducerId,
)

# api/kafka/errors.py at 50942ea: the first matching base class won.
FORMER_TABLE: dict[type[Exception], ErrorCode] = {
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
# Errors no request reaches over the Kafka protocol, whose code is now Kafka's own name.
NAMED_SINCE = {
    "TransactionalIdNotFound": ErrorCode.transactional_id_not_found,
    "RecordSchemaInvalid": ErrorCode.invalid_record,  # schema validation (issue 26)
    "SecurityDisabled": ErrorCode.security_disabled,  # quota overrides (issue 27)
    "UnacceptableCredential": ErrorCode.unacceptable_credential,  # SCRAM (issue 27)
    "UnsupportedSaslMechanism": ErrorCode.unsupported_sasl_mechanism,
    "CredentialNotFound": ErrorCode.resource_not_found,
    # leader epochs (issue 27)
    "FencedLeaderEpoch": ErrorCode.fenced_leader_epoch,
    "UnknownLeaderEpoch": ErrorCode.unknown_leader_epoch,
    # KIP-848 consumer groups (issue 27)
    "FencedMemberEpoch": ErrorCode.fenced_member_epoch,
    "StaleMemberEpoch": ErrorCode.stale_member_epoch,
    "UnreleasedInstanceId": ErrorCode.unreleased_instance_id,
    "UnsupportedAssignor": ErrorCode.unsupported_assignor,
    "UnsupportedGroupVersion": ErrorCode.unsupported_version,
    "InvalidRegularExpression": ErrorCode.invalid_regular_expression,
    "InternalTopicAccess": ErrorCode.invalid_topic_exception,  # internal topics (issue 27)
    "InvalidRecordState": ErrorCode.invalid_record_state,  # share groups (issue 28)
    "ConfigNotApplied": ErrorCode.policy_violation,  # Kafka configs not applied (issue 27)
    "InvalidReplicaAssignment": ErrorCode.invalid_replica_assignment,  # CreateTopics (27)
}


def every_error_class() -> list[type[Exception]]:
    found, pending = [], [StorageError, BrokerError, SecurityError, CorruptBatch, UnsupportedCodec]
    while pending:
        error_type = pending.pop()
        found.append(error_type)
        pending.extend(error_type.__subclasses__())
    return sorted(set(found), key=lambda error_type: error_type.__name__)


def former_code(error_type: type[Exception]) -> ErrorCode:
    for listed, code in FORMER_TABLE.items():
        if issubclass(error_type, listed):
            return code
    if getattr(error_type, "retriable", False):
        return ErrorCode.not_leader_or_follower
    return ErrorCode.unknown_server_error


def an_instance(error_type: type[Exception]) -> Exception:
    instance = Exception.__new__(error_type)
    instance.args = ("test",)
    return instance


@pytest.mark.parametrize("error_type", every_error_class(), ids=lambda t: t.__name__)
def test_the_derived_kafka_code_is_the_former_tables(error_type):
    expected = NAMED_SINCE.get(error_type.__name__, former_code(error_type))
    if error_type is AuthorizationFailed:
        return  # by resource type: the next test
    assert error_code(an_instance(error_type)) == expected


def test_authorization_failures_name_their_resource_types_code():
    for resource_type, code in AUTHORIZATION_CODES.items():
        error = AuthorizationFailed.__new__(AuthorizationFailed)
        error.resource_type = resource_type
        assert error_code(error) == code
    assert kafka_code_of(AuthorizationFailed) == ErrorCode.topic_authorization_failed


def test_a_name_that_is_not_kafkas_derives_no_code():
    class LocalOnly(StorageError):
        code = "SOMETHING_OF_OURS"

    assert kafka_code_of(LocalOnly) is None
    assert error_code(an_instance(LocalOnly)) == ErrorCode.unknown_server_error
