"""Idempotent-producer bookkeeping of one partition: pure, no I/O.

Kafka's rules, per (partition, producer_id): an epoch older than the known one is fenced; a batch
equal to (or inside) one of the producer's last `BATCHES_KEPT` committed batches is a duplicate and
is acknowledged with its original offsets; the next batch must start at last sequence + 1 (or at 0
for a new producer or a new epoch); a gap is OUT_OF_ORDER_SEQUENCE; an older sequence outside the
window is DUPLICATE_SEQUENCE.

`ProducerStates` is a value: `check_and_record` returns a new state, so the partition writer can
keep a group commit's changes tentative and drop them when the commit fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from storage_layout.errors import (
    DuplicateSequence,
    OutOfOrderSequence,
    ProducerFenced,
    UnknownProducerId,
)

BATCHES_KEPT = 5  # Kafka's window: max.in.flight.requests.per.connection <= 5 with idempotence
SEQUENCE_MAX = 2**31 - 1  # int32 column; lakelog does not wrap sequences around
EPOCH_MAX = 2**15 - 1  # int16 column


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """Records `count` of one produce request for one partition, numbered from `base_sequence`."""

    producer_id: int
    epoch: int
    base_sequence: int
    count: int
    transactional: bool = False  # records of a transaction (FORMAT.md §14)

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.count - 1


@dataclass(frozen=True, slots=True)
class CommittedSpan:
    """Sequences [base_sequence, base_sequence + count) of one epoch sit at offsets from
    `base_offset` on, appended at `append_time_ms`."""

    epoch: int
    base_sequence: int
    count: int
    base_offset: int
    append_time_ms: int

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.count - 1

    def offset_of(self, batch: ProducerBatch) -> int | None:
        """The offset of `batch`'s first record if the batch lies inside this span."""
        inside = (
            batch.epoch == self.epoch
            and batch.base_sequence >= self.base_sequence
            and batch.last_sequence <= self.last_sequence
        )
        return self.base_offset + batch.base_sequence - self.base_sequence if inside else None


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A batch that was already committed: acknowledge it with these offsets, append nothing."""

    base_offset: int
    append_time_ms: int


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """What a partition remembers of one producer: its epoch and last committed spans."""

    epoch: int
    spans: tuple[CommittedSpan, ...]

    @property
    def last_sequence(self) -> int:
        return self.spans[-1].last_sequence if self.spans else -1


def check_batch_shape(batch: ProducerBatch) -> None:
    """Raise ValueError for ids, epochs or sequences outside their column types."""
    if batch.producer_id < 0 or not 0 <= batch.epoch <= EPOCH_MAX:
        raise ValueError(
            f"producer_id must be >= 0 and producer_epoch 0..{EPOCH_MAX} "
            f"(got {batch.producer_id}, {batch.epoch})."
        )
    if batch.base_sequence < 0 or batch.last_sequence > SEQUENCE_MAX:
        raise ValueError(
            f"Sequences {batch.base_sequence}..{batch.last_sequence} must lie in 0..{SEQUENCE_MAX}."
        )


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    """A producer a partition remembers, as Kafka's DescribeProducers reports it."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_append_time_ms: int
    transaction_start_offset: int | None  # the first offset of its open transaction


class ProducerStates:
    """Immutable map producer_id -> ProducerEntry with Kafka's sequence rules."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Mapping[int, ProducerEntry] | None = None) -> None:
        self._entries = MappingProxyType(dict(entries or {}))

    def __len__(self) -> int:
        return len(self._entries)

    def active(self, open_first_offsets: Mapping[int, int]) -> list[ActiveProducer]:
        """Every producer remembered, by id, with the first offset of its open transaction
        (from the transaction index's `open_first_offsets`)."""
        return [
            ActiveProducer(
                producer_id,
                entry.epoch,
                entry.last_sequence,
                entry.spans[-1].append_time_ms if entry.spans else -1,
                open_first_offsets.get(producer_id),
            )
            for producer_id, entry in sorted(self._entries.items())
        ]

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    def check(self, batch: ProducerBatch) -> Duplicate | None:
        """None when `batch` may be appended; a Duplicate when it was already committed.

        Raises:
            ProducerFenced, OutOfOrderSequence, DuplicateSequence, UnknownProducerId.
        """
        entry = self._entries.get(batch.producer_id)
        if entry is None:
            if batch.base_sequence != 0:
                raise UnknownProducerId(
                    f"Producer {batch.producer_id} has no state on this partition (new, or "
                    f"older than the state rebuilt on open) and its batch starts at sequence "
                    f"{batch.base_sequence}, not 0. Re-initialise the producer (new epoch) and "
                    f"start again at sequence 0."
                )
            return None
        if batch.epoch < entry.epoch:
            raise ProducerFenced(
                f"Producer {batch.producer_id} epoch {batch.epoch} is fenced: this partition "
                f"has accepted epoch {entry.epoch}."
            )
        if batch.epoch > entry.epoch:
            if batch.base_sequence != 0:
                raise OutOfOrderSequence(
                    f"Producer {batch.producer_id}: the first batch of epoch {batch.epoch} must "
                    f"start at sequence 0, not {batch.base_sequence}."
                )
            return None
        return _check_same_epoch(entry, batch)

    def recorded(
        self, batch: ProducerBatch, base_offset: int, append_time_ms: int
    ) -> ProducerStates:
        """A new state in which `batch` (checked, not a duplicate) is committed at base_offset."""
        entry = self._entries.get(batch.producer_id)
        span = CommittedSpan(
            batch.epoch, batch.base_sequence, batch.count, base_offset, append_time_ms
        )
        spans = entry.spans if entry is not None and entry.epoch == batch.epoch else ()
        entries = dict(self._entries)
        entries[batch.producer_id] = ProducerEntry(batch.epoch, (*spans, span)[-BATCHES_KEPT:])
        return ProducerStates(entries)

    def fenced_to(self, producer_id: int, epoch: int) -> ProducerStates:
        """A new state in which the producer's epoch is at least `epoch` (a transaction
        marker's): batches of older epochs are then fenced, and a batch of `epoch` starts at
        sequence 0 unless the producer already wrote with it."""
        entry = self._entries.get(producer_id)
        if entry is not None and entry.epoch >= epoch:
            return self
        return ProducerStates({**self._entries, producer_id: ProducerEntry(epoch, ())})

    def adding(self, other: ProducerStates) -> ProducerStates:
        """This state plus `other`'s producers that this state does not know."""
        if not other._entries:
            return self
        return ProducerStates({**other._entries, **self._entries})

    def without_expired(self, now_ms: int, expiration_ms: int) -> ProducerStates:
        """This state without the producers whose last batch is older than `expiration_ms`
        (Kafka's producer.id.expiration.ms): the map does not grow with every producer ever
        seen. An expired producer is then unknown, as after a restart past the bound."""
        cutoff_ms = now_ms - expiration_ms
        kept = {
            producer_id: entry
            for producer_id, entry in self._entries.items()
            # An entry without spans is a fence a marker set: kept, or the fenced epoch's
            # zombie would be let in again.
            if not entry.spans or entry.spans[-1].append_time_ms >= cutoff_ms
        }
        return self if len(kept) == len(self._entries) else ProducerStates(kept)

    @classmethod
    def from_spans(cls, spans: Iterable[tuple[int, CommittedSpan]]) -> ProducerStates:
        """State rebuilt from stored (producer_id, span) pairs in offset order."""
        state = cls()
        for producer_id, span in spans:
            batch = ProducerBatch(producer_id, span.epoch, span.base_sequence, span.count)
            entry = state.entry(producer_id)
            if entry is not None and span.epoch < entry.epoch:
                continue  # a fenced epoch's leftovers cannot be newer than the fence
            state = state.recorded(batch, span.base_offset, span.append_time_ms)
        return state


def _check_same_epoch(entry: ProducerEntry, batch: ProducerBatch) -> Duplicate | None:
    for span in reversed(entry.spans):
        offset = span.offset_of(batch)
        if offset is not None:
            return Duplicate(offset, span.append_time_ms)
    expected = entry.last_sequence + 1
    if batch.base_sequence == expected:
        return None
    if batch.base_sequence > expected:
        raise OutOfOrderSequence(
            f"Producer {batch.producer_id} epoch {batch.epoch}: expected sequence {expected}, "
            f"got {batch.base_sequence} (a gap: an earlier batch was not committed)."
        )
    raise DuplicateSequence(
        f"Producer {batch.producer_id} epoch {batch.epoch}: sequences {batch.base_sequence}.."
        f"{batch.last_sequence} were committed before the last {BATCHES_KEPT} batches; their "
        f"offsets are no longer known. Nothing was appended."
    )
