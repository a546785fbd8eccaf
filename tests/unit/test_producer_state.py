"""Kafka's idempotent-producer sequence rules, on the pure ProducerStates value."""

from __future__ import annotations

import pytest

from storage_layout.errors import (
    DuplicateSequence,
    OutOfOrderSequence,
    ProducerFenced,
    UnknownProducerId,
)
from storage_layout.producer_state import (
    BATCHES_KEPT,
    CommittedSpan,
    Duplicate,
    ProducerBatch,
    ProducerStates,
    check_batch_shape,
)


def committed(*batches: tuple[int, int, int, int]) -> ProducerStates:
    """A state with (producer, epoch, base_sequence, count) batches at consecutive offsets."""
    state, offset = ProducerStates(), 0
    for producer, epoch, base, count in batches:
        batch = ProducerBatch(producer, epoch, base, count)
        assert state.check(batch) is None
        state = state.recorded(batch, offset, 1000 + offset)
        offset += count
    return state


def test_new_producer_starts_at_zero():
    """A producer without state may append a batch that starts at sequence 0."""
    assert ProducerStates().check(ProducerBatch(7, 0, 0, 3)) is None


def test_new_producer_not_at_zero_is_unknown():
    """A producer without state whose batch starts above 0 gets UNKNOWN_PRODUCER_ID."""
    with pytest.raises(UnknownProducerId):
        ProducerStates().check(ProducerBatch(7, 0, 5, 1))


def test_consecutive_batch_is_appended():
    """The batch starting at last sequence + 1 is appended."""
    assert committed((1, 0, 0, 3)).check(ProducerBatch(1, 0, 3, 2)) is None


def test_retry_of_a_batch_in_the_window_returns_its_offsets():
    """Each of the last five batches, retried, is a duplicate with its original offsets."""
    state = committed(*[(1, 0, 2 * i, 2) for i in range(BATCHES_KEPT)])
    for i in range(BATCHES_KEPT):
        assert state.check(ProducerBatch(1, 0, 2 * i, 2)) == Duplicate(2 * i, 1000 + 2 * i)


def test_batch_older_than_the_window_is_duplicate_sequence():
    """A retry of a batch that left the five-batch window gets DUPLICATE_SEQUENCE."""
    state = committed(*[(1, 0, i, 1) for i in range(BATCHES_KEPT + 1)])
    with pytest.raises(DuplicateSequence):
        state.check(ProducerBatch(1, 0, 0, 1))


def test_gap_is_out_of_order():
    """A batch that skips sequences gets OUT_OF_ORDER_SEQUENCE."""
    with pytest.raises(OutOfOrderSequence):
        committed((1, 0, 0, 3)).check(ProducerBatch(1, 0, 4, 1))


def test_older_epoch_is_fenced():
    """Once epoch 1 was accepted, epoch 0 is PRODUCER_FENCED."""
    state = committed((1, 0, 0, 1), (1, 1, 0, 1))
    with pytest.raises(ProducerFenced):
        state.check(ProducerBatch(1, 0, 1, 1))


def test_new_epoch_starts_at_zero_and_only_there():
    """A newer epoch resets the sequence: 0 is appended, anything else is out of order."""
    state = committed((1, 0, 0, 10))
    assert state.check(ProducerBatch(1, 1, 0, 1)) is None
    with pytest.raises(OutOfOrderSequence):
        state.check(ProducerBatch(1, 1, 10, 1))


def test_producers_are_independent():
    """Another producer id has its own sequence space."""
    assert committed((1, 0, 0, 5)).check(ProducerBatch(2, 0, 0, 1)) is None


def test_recorded_leaves_the_original_state_unchanged():
    """States are values: recording returns a new state (tentative group commits roll back)."""
    before = committed((1, 0, 0, 1))
    after = before.recorded(ProducerBatch(1, 0, 1, 1), 1, 0)
    assert before.entry(1).last_sequence == 0 and after.entry(1).last_sequence == 1


def test_rebuilt_span_covers_batches_inside_it():
    """A span rebuilt from the table (several batches merged) answers retries of its parts."""
    state = ProducerStates.from_spans([(1, CommittedSpan(0, 0, 10, 100, 5))])
    assert state.check(ProducerBatch(1, 0, 4, 3)) == Duplicate(104, 5)
    assert state.check(ProducerBatch(1, 0, 10, 1)) is None


def test_batch_shape_limits():
    """Negative ids, epochs beyond int16 and sequences beyond int32 are refused."""
    for bad in (
        ProducerBatch(-1, 0, 0, 1),
        ProducerBatch(1, 2**15, 0, 1),
        ProducerBatch(1, 0, 2**31 - 1, 2),
    ):
        with pytest.raises(ValueError):
            check_batch_shape(bad)
    check_batch_shape(ProducerBatch(1, 0, 2**31 - 1, 1))


def test_producers_idle_past_the_expiration_are_forgotten():
    """producer.id.expiration.ms: an idle producer leaves the map and is then unknown; one that
    wrote within the window keeps its state."""
    state = ProducerStates().recorded(ProducerBatch(1, 0, 0, 1), 0, 1_000)
    state = state.recorded(ProducerBatch(2, 0, 0, 1), 1, 5_000)
    kept = state.without_expired(now_ms=6_000, expiration_ms=2_000)
    assert kept.entry(1) is None and kept.entry(2) is not None
    with pytest.raises(UnknownProducerId):
        kept.check(ProducerBatch(1, 0, 1, 1))
    assert state.without_expired(now_ms=6_000, expiration_ms=10_000) is state
