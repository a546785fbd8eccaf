"""Kafka's incremental fetch sessions (api/kafka/fetch_sessions.py): opening, incremental
requests that add, update and forget partitions, epochs, eviction, and what an incremental
answer carries."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from api.kafka.fetch_sessions import FetchSessionError, FetchSessions


def request(session_id: int, epoch: int, partitions=(), forgotten=()):
    by_topic: dict[str, list] = {}
    for topic, partition, offset in partitions:
        by_topic.setdefault(topic, []).append(
            SimpleNamespace(partition=partition, fetch_offset=offset, partition_max_bytes=1000)
        )
    gone: dict[str, list[int]] = {}
    for topic, partition in forgotten:
        gone.setdefault(topic, []).append(partition)
    return SimpleNamespace(
        session_id=session_id,
        session_epoch=epoch,
        topics=[SimpleNamespace(topic=t, partitions=p) for t, p in by_topic.items()],
        forgotten_topics_data=[SimpleNamespace(topic=t, partitions=p) for t, p in gone.items()],
    )


def answer(high_watermark: int, records: bytes = b"") -> dict:
    return {
        "error_code": 0,
        "high_watermark": high_watermark,
        "log_start_offset": 0,
        "records": records,
    }


def test_a_sessionless_fetch_reads_what_it_lists_and_opens_nothing():
    plan = FetchSessions().plan(request(0, -1, [("t", 0, 5)]))
    assert plan.session is None and plan.wanted == [("t", 0, 5, 1000, -1)]


def test_an_incremental_fetch_updates_adds_and_forgets_partitions():
    sessions = FetchSessions()
    opened = sessions.plan(request(0, 0, [("t", 0, 5), ("t", 1, 7)]))
    session = opened.session
    sessions.advance(session, {("t", 0): answer(10), ("t", 1): answer(7)})
    plan = sessions.plan(
        request(session.session_id, 1, [("t", 0, 10), ("u", 0, 0)], forgotten=[("t", 1)])
    )
    assert plan.incremental
    assert sorted(plan.wanted) == [("t", 0, 10, 1000, -1), ("u", 0, 0, 1000, -1)]


def test_an_incremental_answer_carries_only_what_changed():
    sessions = FetchSessions()
    session = sessions.plan(request(0, 0, [("t", 0, 0), ("t", 1, 0)])).session
    sessions.advance(session, {("t", 0): answer(3), ("t", 1): answer(0)})
    assert not session.worth_answering(("t", 1), answer(0))  # nothing new
    assert session.worth_answering(("t", 1), answer(1))  # new high watermark
    assert session.worth_answering(("t", 0), answer(3, b"batch"))  # records
    assert session.worth_answering(("t", 0), {**answer(3), "error_code": 6})  # an error


def test_wrong_epochs_and_unknown_or_evicted_sessions_are_refused():
    sessions = FetchSessions(sessions_max=1)
    first = sessions.plan(request(0, 0, [("t", 0, 0)])).session
    with pytest.raises(FetchSessionError) as wrong:
        sessions.plan(request(first.session_id, 5))
    assert wrong.value.code == ErrorCode.invalid_fetch_session_epoch
    sessions.plan(request(0, 0, [("t", 1, 0)]))  # evicts the first (one slot)
    with pytest.raises(FetchSessionError) as gone:
        sessions.plan(request(first.session_id, 1))
    assert gone.value.code == ErrorCode.fetch_session_id_not_found
