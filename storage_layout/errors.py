"""Storage errors: one tree, stable codes, `retriable` marks what a client may simply retry.

`code` is the error's name in Kafka's protocol (Errors.java) when Kafka has one for it, written
once here: the Kafka front-end answers with it (api/kafka/errors.py); an error Kafka has no name
for has lakelog's own."""

from __future__ import annotations


class StorageError(Exception):
    """Base of every storage failure. `code` is stable and part of the contract."""

    code = "STORAGE_ERROR"
    retriable = False


class TopicNotFound(StorageError):
    code = "UNKNOWN_TOPIC_OR_PARTITION"

    def __init__(self, topic: str) -> None:
        super().__init__(f"Topic '{topic}' does not exist.")
        self.topic = topic


class PartitionNotFound(StorageError):
    code = "UNKNOWN_TOPIC_OR_PARTITION"

    def __init__(self, topic: str, partition: int, partitions: int) -> None:
        super().__init__(
            f"Partition {partition} of topic '{topic}' does not exist "
            f"(the topic has partitions 0..{partitions - 1})."
        )
        self.topic, self.partition = topic, partition


class TopicExists(StorageError):
    code = "TOPIC_ALREADY_EXISTS"

    def __init__(self, topic: str) -> None:
        super().__init__(f"Topic '{topic}' already exists.")
        self.topic = topic


class InvalidTopic(StorageError):
    code = "INVALID_TOPIC_EXCEPTION"


class InvalidConfig(StorageError):
    code = "INVALID_CONFIG"


class ConfigNotApplied(InvalidConfig):
    """A Kafka topic config lakelog does not apply, set to other than Kafka's default (as a
    managed Kafka service refuses the configs it does not offer)."""

    code = "POLICY_VIOLATION"


class InvalidPartitions(StorageError):
    code = "INVALID_PARTITIONS"


class OffsetOutOfRange(StorageError):
    """A read below log_start_offset or above the high watermark."""

    code = "OFFSET_OUT_OF_RANGE"

    def __init__(self, offset: int, log_start_offset: int, high_watermark: int) -> None:
        super().__init__(
            f"Offset {offset} is out of range: this partition holds offsets "
            f"{log_start_offset} (log_start_offset) to {high_watermark} (high_watermark, "
            f"the next offset to be written)."
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark


class AppendConflict(StorageError):
    """The offset compare-and-set lost: another writer committed offsets after our snapshot.

    Nothing of this append was committed; the writer must reload before assigning offsets again.
    """

    code = "NOT_LEADER_OR_FOLLOWER"  # another writer came first: retry at the leader
    retriable = True


class LeadershipConflict(StorageError):
    """Another node committed a leadership change first: this node does not lead the partition."""

    code = "NOT_LEADER_OR_FOLLOWER"
    retriable = True


class UnsupportedTableFeatures(StorageError):
    """The table uses Delta features deltalake cannot append to or read with pyarrow."""

    code = "UNSUPPORTED_TABLE_FEATURES"


class CorruptPartition(StorageError):
    """The table contradicts the log invariants (e.g. offsets not dense)."""

    code = "CORRUPT_PARTITION"


class PartitionTableMissing(CorruptPartition):
    """The partition's table does not exist: its topic is being created (the catalog names a
    topic before its tables are made) or deleted. Retriable: a moment later it is there, or
    the topic is gone."""

    code = "LEADER_NOT_AVAILABLE"  # a topic being created: retriable
    retriable = True


class StorageUnavailable(StorageError):
    """The storage root could not be read or written (I/O error, full disk, permissions)."""

    code = "KAFKA_STORAGE_ERROR"
    retriable = True


# ---- idempotent producers (Kafka's error names; FORMAT.md §10) -----------------------------


class ProducerError(StorageError):
    """A produce batch broke the idempotent-producer rules; nothing of it was appended."""


class OutOfOrderSequence(ProducerError):
    """The batch's base sequence leaves a gap after the producer's last committed sequence."""

    code = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class DuplicateSequence(ProducerError):
    """The batch repeats sequences older than the dedup window (its offsets are not known)."""

    code = "DUPLICATE_SEQUENCE_NUMBER"


class ProducerFenced(ProducerError):
    """The batch's epoch is older than one this partition has already accepted."""

    code = "INVALID_PRODUCER_EPOCH"  # what Produce answers a fenced epoch with


class UnknownProducerId(ProducerError):
    """The partition keeps no state for this producer and the batch does not start at 0."""

    code = "UNKNOWN_PRODUCER_ID"


class InvalidSchema(StorageError):
    """A schema that does not parse, or names references that do not resolve (the registry's
    42201)."""

    code = "INVALID_SCHEMA"
