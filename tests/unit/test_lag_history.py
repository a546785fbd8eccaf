"""The lag history's samples: a partition whose leader does not answer keeps its last lag (a
flat line, flagged partial), a partition that is gone has none."""

from __future__ import annotations

from api.core.group_lag import UNREACHABLE
from api.core.lag_history import LagSample, _sample
from storage_layout.records import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_lags_are_ends_minus_committed_offsets_never_below_zero():
    sample = _sample(1_000, {A0: 4, A1: 9}, {A0: 10, A1: 7}, None)
    assert sample == LagSample(1_000, ((A0, 6), (A1, 0)), partial=False)
    assert (sample.total_lag, sample.max_lag) == (6, 6)


def test_an_unreachable_leader_carries_the_last_lag_over_and_marks_the_sample_partial():
    before = _sample(1_000, {A0: 4, A1: 2}, {A0: 10, A1: 5}, None)
    after = _sample(2_000, {A0: 4, A1: 2, B0: 0}, {A0: UNREACHABLE, A1: 8, B0: UNREACHABLE}, before)
    assert after.lags == ((A0, 6), (A1, 6))  # A0 as before; B0 never known: missing
    assert after.partial


def test_a_partition_that_is_gone_has_no_lag():
    before = _sample(1_000, {A0: 1, A1: 1}, {A0: 3, A1: 3}, None)
    after = _sample(2_000, {A0: 1, A1: 1}, {A0: 3, A1: None}, before)
    assert after.lags == ((A0, 2),) and not after.partial
