"""Consumer group errors, named after Kafka's error codes. They are BrokerErrors, so the one map
in api/http/errors.py turns them into HTTP statuses and stable error codes."""

from __future__ import annotations

from api.core.errors import BrokerError


class GroupError(BrokerError):
    code = "GROUP_ERROR"


class UnknownMemberId(GroupError):
    """The member is not (or no longer) in the group: it must join again without an id."""

    code = "UNKNOWN_MEMBER_ID"


class IllegalGeneration(GroupError):
    """The request names an older (or unknown) generation: the member missed a rebalance."""

    code = "ILLEGAL_GENERATION"


class RebalanceInProgress(GroupError):
    """The group is rebalancing: the member must join again to get its new assignment."""

    code = "REBALANCE_IN_PROGRESS"
    retriable = True


class FencedInstanceId(GroupError):
    """Another member joined with the same group.instance.id and replaced this one."""

    code = "FENCED_INSTANCE_ID"


class InconsistentGroupProtocol(GroupError):
    """The member supports none of the assignors every other member supports."""

    code = "INCONSISTENT_GROUP_PROTOCOL"


class NonEmptyGroup(GroupError):
    """The operation needs a group without active members (e.g. resetting offsets)."""

    code = "NON_EMPTY_GROUP"


class GroupNotFound(GroupError):
    code = "GROUP_ID_NOT_FOUND"

    def __init__(self, group_id: str, message: str | None = None) -> None:
        super().__init__(message or f"Consumer group '{group_id}' does not exist on this cluster.")


class FencedMemberEpoch(GroupError):
    """KIP-848: the member's epoch is not the one the coordinator gave it (it was removed, or
    is ahead): it must give up its partitions and join again with epoch 0."""

    code = "FENCED_MEMBER_EPOCH"


class StaleMemberEpoch(GroupError):
    """KIP-848: an offset commit or fetch with an epoch other than the member's current one."""

    code = "STALE_MEMBER_EPOCH"


class UnreleasedInstanceId(GroupError):
    """KIP-848: a static member joined with an instance id another member still holds (it
    has not left with epoch -2, nor timed out)."""

    code = "UNRELEASED_INSTANCE_ID"


class UnsupportedAssignor(GroupError):
    """KIP-848: group.remote.assignor names an assignor the coordinator does not have."""

    code = "UNSUPPORTED_ASSIGNOR"


class UnsupportedGroupVersion(GroupError):
    """A request version the group's protocol does not serve (e.g. OffsetCommit v8 or older
    from a member of a KIP-848 consumer group, whose epochs need v9)."""

    code = "UNSUPPORTED_VERSION"


class InvalidRegularExpression(GroupError):
    """KIP-848: the subscription's regular expression does not compile."""

    code = "INVALID_REGULAR_EXPRESSION"


class NotCoordinator(GroupError):
    """This node no longer coordinates the group (another node took it); retry."""

    code = "NOT_COORDINATOR"
    retriable = True


class InvalidGroupRequest(GroupError):
    """A group or consumer request with a bad value (timeouts, names, assignor, offsets)."""

    code = "INVALID_REQUEST"


class NoOffsetForPartition(GroupError):
    """No committed offset (or one out of range) and auto.offset.reset=none."""

    code = "NO_OFFSET_FOR_PARTITION"


class ConsumerInstanceNotFound(GroupError):
    code = "CONSUMER_INSTANCE_NOT_FOUND"


class ConsumerInstanceExists(GroupError):
    code = "CONSUMER_INSTANCE_EXISTS"


class IllegalConsumerState(GroupError):
    """Subscribing and assigning are exclusive; seeking needs an assigned partition."""

    code = "ILLEGAL_STATE"


class InvalidConsumerConfig(GroupError):
    code = "INVALID_CONSUMER_CONFIG"


class ConsumerFormatMismatch(GroupError):
    """The Accept header asks for another embedded format than the instance was created with."""

    code = "CONSUMER_FORMAT_MISMATCH"


class GroupSubscribedToTopic(GroupError):
    """Offsets of a topic the group's active members subscribe to cannot be deleted."""

    code = "GROUP_SUBSCRIBED_TO_TOPIC"


class RecordNotFound(GroupError):
    """The offset is within the partition's bounds but compaction removed its record."""

    code = "RECORD_NOT_FOUND"
