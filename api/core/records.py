"""Value types every front-end shares with the broker core: what a produce asks for and what it
gets back, what a fetch asks for. Front-ends build these from their own wire formats."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from api.core.errors import InvalidProducerRequest
from storage_layout.producer_state import ProducerBatch, check_batch_shape
from storage_layout.records import Isolation, NewRecord, Records

ACKS_NONE = "0"  # answer once queued
ACKS_ALL = "all"  # answer after the durable Delta commit ("1" and "-1" mean the same here)


@dataclass(frozen=True, slots=True)
class ProduceRecord:
    """A record of a produce request and the partition it asked for (None = let us choose)."""

    partition: int | None
    record: NewRecord


@dataclass(frozen=True, slots=True)
class OpenedBatch:
    """A record batch's records once decoded, and its producer batch (None: not idempotent)."""

    records: Records
    producer: ProducerBatch | None


@dataclass(frozen=True, slots=True)
class RecordAck:
    """Where one produced record landed."""

    partition: int
    offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class RecordQueued:
    """acks=0: the record was queued for `partition`; its offset is not reported."""

    partition: int


@dataclass(frozen=True, slots=True)
class Idempotence:
    """Producer fields of a produce request: a base sequence per partition that receives
    records (`base_sequences`), or one base sequence for whichever partition does (v3). With
    `transactional_id`, the records belong to the open transaction of that id."""

    producer_id: int
    epoch: int
    base_sequences: Mapping[int, int] | None = None
    base_sequence: int | None = None
    transactional_id: str | None = None

    def batch(self, partition: int, count: int) -> ProducerBatch:
        """The batch of `count` records routed to `partition` (InvalidProducerRequest if none)."""
        if self.base_sequences is not None:
            sequence = self.base_sequences.get(partition)
        else:
            sequence = self.base_sequence
        if sequence is None:
            raise InvalidProducerRequest(
                f"Records are routed to partition {partition} but the request has no base "
                f"sequence for it: add \"{partition}\" to 'base_sequences'."
            )
        transactional = self.transactional_id is not None
        batch = ProducerBatch(self.producer_id, self.epoch, sequence, count, transactional)
        try:
            check_batch_shape(batch)
        except ValueError as error:
            raise InvalidProducerRequest(str(error)) from None
        return batch


@dataclass(frozen=True, slots=True)
class FetchRequest:
    topic: str
    partition: int
    offset: int
    bytes_max: int
    timeout_ms: int
    isolation: Isolation = Isolation.PLAIN
