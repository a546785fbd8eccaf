"""Bounded T1, T3 and T4 runs against real gateway processes: the checker finds 0 anomalies,
and it does find them in a deliberately broken run and in doctored copies of a real history.

Long versions: `make chaos` (RELIABILITY.md)."""

from __future__ import annotations

import pytest

from chaos.checker import check
from chaos.clients import AssignPoller, IdempotentProducer
from chaos.history import INFO, OK, Poll, Recorder, Send, load, with_op
from chaos.scenarios import Cluster, create_topic, run_t1, run_t3, run_t4

pytestmark = pytest.mark.gateway

FAULT_ENV = {"LAKELOG_FAULT_POINT": "after_commit_before_ack"}


@pytest.fixture(scope="module")
def t1_result(tmp_path_factory):
    return run_t1(
        seed=11,
        ops=1000,
        producers=4,
        kill_every_s=(1.5, 3.0),  # a restart takes ~4 s: the gateway is up about half the time
        kills_min=2,  # a fast machine sends 1000 records between two kills
        duration_s=40,
        workdir=tmp_path_factory.mktemp("t1"),
    )


def test_t1_idempotent_producers_survive_kill_9_restarts(t1_result):
    """T1: acked sends are neither lost nor duplicated across kill -9 + restart; retries of the
    same (pid, epoch, seq) resolve to one offset; the final drain sees everything."""
    assert t1_result.report.valid, t1_result.text()
    assert t1_result.faults["kill"] >= 2, t1_result.text()
    assert t1_result.report.operations[("send", "info")] > 0  # the kills did hit requests
    assert t1_result.report.operations[("send", "ok")] >= 200
    assert t1_result.recovery_ms and max(t1_result.recovery_ms) < 30_000


def test_the_checker_finds_anomalies_in_a_doctored_t1_history(t1_result):
    """A real T1 history with one drained record dropped, or one ack moved, is invalid."""
    events = load(t1_result.history_path)
    drains = [
        i for i, e in enumerate(events) if isinstance(e.op, Poll) and e.op.final and e.op.records
    ]
    index = drains[len(drains) // 2]
    dropped = events[index].op.records[0]
    lossy = list(events)
    lossy[index] = with_op(events[index], records=events[index].op.records[1:])
    report = check(lossy)
    assert report.count("unseen") == 1, report.text()
    assert report.count("offset-gap") + report.count("poll-skip") >= 1, report.text()
    assert report.anomalies["unseen"][0]["value"] == dropped[3]

    first_ack = next(i for i, e in enumerate(events) if e.type == OK and isinstance(e.op, Send))
    moved = list(events)
    moved[first_ack] = with_op(events[first_ack], offset=events[first_ack].op.offset + 1)
    report = check(moved)
    assert report.count("inconsistent-offsets") >= 1 and report.count("duplicate") >= 1


def send_through_a_crash_after_commit(tmp_path, *, idempotent: bool):
    """One record sent to a gateway that exits after committing, before acking; the client
    retries it on the restarted gateway. Returns the checked report."""
    recorder = Recorder(tmp_path / "history.jsonl")
    cluster = Cluster(tmp_path / "data", recorder, env=FAULT_ENV)
    try:
        create_topic(cluster.endpoint.url, "crash", 1)
        producer = IdempotentProducer(
            "p0", cluster.endpoint, recorder, "crash", idempotent=idempotent
        )
        if idempotent:
            producer.init(deadline=float("inf"))
        op = Send("crash", 0, "v-0", None, producer.producer_id, producer.epoch, 0)
        assert producer.attempt(op)[0] == INFO  # committed, then the gateway exited
        cluster.kill_and_restart()
        outcome = producer.attempt(op)[0]  # the retry
        cluster.kill_and_restart(env={})
        if outcome != OK:
            assert producer.attempt(op)[0] == OK  # a plain producer writes it a third time
        poller = AssignPoller("drain", cluster.endpoint, recorder, "crash")
        poller.drain(range(1), deadline=float("inf"))
    finally:
        cluster.stop()
        recorder.close()
    return check(recorder.events)


def test_a_retry_after_a_crash_between_commit_and_ack_is_deduplicated(tmp_path):
    """Idempotent producer: the retry gets the original offset; the history is clean."""
    report = send_through_a_crash_after_commit(tmp_path, idempotent=True)
    assert report.valid, report.text()


def test_the_checker_catches_the_duplicates_of_a_plain_producer_run(tmp_path):
    """Control run (deliberately broken: no idempotence): the same crash duplicates the
    record, and the checker reports it."""
    report = send_through_a_crash_after_commit(tmp_path, idempotent=False)
    assert report.count("duplicate") == 1, report.text()
    assert report.anomalies["duplicate"][0]["value"] == "v-0"


def test_t3_group_members_killed_mid_batch(tmp_path):
    """T3: commits never regress, never pass what was processed, cover every offset below
    them; commits of an evicted (zombie) member's old generation are refused."""
    result = run_t3(seed=5, ops=900, kill_every_s=(0.8, 1.6), duration_s=40, workdir=tmp_path)
    assert result.valid, result.text()
    assert result.faults["kill-member"] >= 2 and result.faults["pause-member"] == 1
    assert result.report.operations[("commit", "ok")] > 10


def test_t4_retention_and_compaction_during_traffic(tmp_path):
    """T4: offsets keep their values, a fetch below the log start is 416, the latest value of
    each key survives compaction, no produce fails."""
    result = run_t4(seed=3, ops=600, jobs_every_s=1.0, duration_s=40, workdir=tmp_path)
    assert result.valid, result.text()
    assert result.figures["probes below log start"].get("416", 0) >= 1, result.text()
    assert result.faults["job"] >= 4
    assert result.report.operations[("send", "ok")] == 600
