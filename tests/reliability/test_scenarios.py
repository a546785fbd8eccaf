"""Bounded T1, T2, T2b, T3, T3g and T4 runs against real gateway processes: the checker finds 0
anomalies, and it does find them in a deliberately broken run and in doctored copies of a real
history.

Long versions: `make chaos` (RELIABILITY.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chaos.checker import check, commits_without_rejoin
from chaos.clients import AssignPoller, GroupMember, IdempotentProducer
from chaos.history import (
    FAIL,
    GATEWAY_RESTART,
    INFO,
    OK,
    Assign,
    Commit,
    Fault,
    Poll,
    Recorder,
    Send,
    load,
    with_op,
)
from chaos.scenarios import (
    Cluster,
    create_topic,
    run_t1,
    run_t2,
    run_t2b,
    run_t3,
    run_t3g,
    run_t4,
    run_tk,
)

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


# Two pauses of 3-4 s (past the 2 s lease) close together: a bounded run stays under ~30 s.
T2_BOUNDED = {"ops": 300, "pause_s": (3.0, 4.0), "pause_every_s": (0.5, 1.5), "duration_s": 25}


def test_t2_a_leader_paused_past_its_lease_is_fenced(tmp_path):
    """T2: the leader of a partition SIGSTOPped past its lease while sends wait in its socket,
    then SIGCONTed: a survivor takes over, the stale leader answers its parked sends with
    50003 (fenced) and no acked write is lost, duplicated or given an offset twice."""
    result = run_t2(seed=21, pauses_min=2, workdir=tmp_path, **T2_BOUNDED)
    assert result.valid, result.text()
    assert result.faults["pause-leader"] >= 2, result.text()
    assert result.figures["stale leader fenced (50003 answers)"] >= 1, result.text()
    assert result.figures["leader changes observed"] >= 1, result.text()
    # Liveness, not speed: the survivor takes over at all (long runs: p99 about 20 s).
    assert result.recovery_ms and max(result.recovery_ms) < 60_000, result.text()


def test_t2b_control_without_the_fence_is_flagged(tmp_path):
    """T2b, the control: the same pause with the compare-and-set and lease checks disabled;
    the stale leader appends its parked sends at offsets the survivor assigned too, and the
    checker reports it."""
    # What the stale leader's appends do depends on the interleaving: offsets assigned twice
    # (inconsistent-offsets, duplicate), or acknowledged records replaced (lost-write). Any
    # of them is the proof; read-side kinds alone (poll-skip) would not be. Whether its parked
    # sends commit before it learns of the new leader is a race (a table read for a fetch can
    # win it), so up to six seeds are run until one shows the damage. The stale leader used
    # to step over the survivor's commits one version a try and reload after 100 of them,
    # which a survivor committing faster than that made it do: no seed of six showed damage
    # in one CI run. It now skips every taken version at once; 4 of 5 seeds show damage.
    write_anomalies = ("inconsistent-offsets", "duplicate", "lost-write")
    texts = []
    for seed in (22, 23, 24, 25, 26, 27):
        (tmp_path / str(seed)).mkdir()
        result = run_t2b(
            seed=seed, pauses_min=1, partitions=1, workdir=tmp_path / str(seed), **T2_BOUNDED
        )
        texts.append(result.text())  # a seed whose race the stale leader lost shows nothing
        if sum(result.report.count(kind) for kind in write_anomalies) >= 1:
            break
    assert sum(result.report.count(kind) for kind in write_anomalies) >= 1, "\n".join(texts)


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
    # At least one zombie: the first fault always is; a slow (loaded) run may draw another.
    assert result.faults["kill-member"] >= 2 and result.faults["pause-member"] >= 1
    assert result.report.operations[("commit", "ok")] > 10


@pytest.fixture(scope="module")
def t3g_result(tmp_path_factory):
    return run_t3g(
        seed=7,
        ops=600,
        kill_every_s=(1.0, 2.5),
        kills_min=2,  # production goes on until the gateway was restarted twice
        duration_s=40,
        workdir=tmp_path_factory.mktemp("t3g"),
    )


def test_t3g_group_across_gateway_kill_9_restarts(t3g_result):
    """T3g: across kill -9 + restart of the gateway, commits never regress or pass what was
    processed, a member holding a pre-restart generation is refused, the group catches up."""
    result = t3g_result
    assert result.valid, result.text()
    assert result.faults["restart"] >= 2 and result.faults["hold-member"] >= 1, result.text()
    without_rejoin = result.figures["commits after a restart without rejoining"]
    assert without_rejoin.get("refused:40911", 0) >= 1 and "ok" not in without_rejoin
    assert result.report.operations[("commit", "ok")] > 10
    assert result.recovery_ms and max(result.recovery_ms) < 30_000, result.text()


def _first_restart_ns(events) -> int:
    return next(
        e.time_ns for e in events if isinstance(e.op, Fault) and e.op.kind == GATEWAY_RESTART
    )


def _group_commits(events, outcome: str) -> list[int]:
    return [i for i, e in enumerate(events) if e.type == outcome and isinstance(e.op, Commit)]


def _regressed_commit(events, restart_ns: int) -> tuple[int, int]:
    """A commit accepted after the restart, and the highest offset accepted before it for
    the same partition (> 0, so the commit can be moved below it)."""
    highest: dict[int, int] = {}
    for index in _group_commits(events, OK):
        op = events[index].op
        if events[index].time_ns < restart_ns:
            highest[op.partition] = max(op.offset, highest.get(op.partition, 0))
        elif highest.get(op.partition, 0) > 0:
            return index, highest[op.partition]
    raise AssertionError("no commit after the restart on a partition committed before it")


def _without_record(event, topic: str, partition: int, offset: int):
    """The event without (topic, partition, offset) if it is a group member's poll."""
    if not (isinstance(event.op, Poll) and event.op.group is not None):
        return event
    kept = tuple(r for r in event.op.records if r[:3] != (topic, partition, offset))
    return with_op(event, records=kept)


def test_the_checker_finds_group_anomalies_in_a_doctored_t3g_history(t3g_result):
    """The real T3g history, doctored: the refused pre-restart commit accepted is a
    stale-commit; a post-restart commit moved below a pre-restart one is a commit-regress; an
    offset the group never polled below the final commit is commit-unprocessed."""
    events = load(t3g_result.history_path)
    restart_ns = _first_restart_ns(events)
    refused = next(i for i in _group_commits(events, FAIL) if events[i].op.error == "40911")
    accepted = list(events)
    accepted[refused] = replace(
        events[refused], type=OK, op=replace(events[refused].op, error=None)
    )
    report = check(accepted)
    assert [e["op_id"] for e in report.anomalies["stale-commit"]] == [events[refused].op_id]

    index, highest = _regressed_commit(events, restart_ns)
    regressed = list(events)
    regressed[index] = with_op(events[index], offset=highest - 1)
    report = check(regressed)
    assert report.anomalies["commit-regress"][0]["earlier_max"] == highest, report.text()

    topic, partition = events[index].op.topic, events[index].op.partition
    report = check([_without_record(e, topic, partition, 0) for e in events])
    assert report.anomalies["commit-unprocessed"][0]["missing"] == [0], report.text()


def _generation_lowered(event, after_ns: int, by: int):
    """An accepted join or commit after `after_ns` with its generation lowered by `by`."""
    if event.time_ns <= after_ns or event.type != OK:
        return event
    if isinstance(event.op, Commit) or (
        isinstance(event.op, Assign) and event.op.generation is not None
    ):
        return with_op(event, generation=event.op.generation - by)
    return event


def test_generation_numbers_are_compared_within_one_gateway_lifetime(t3g_result):
    """A restarted coordinator counts generations on from the newest committed one, so the
    numbers may repeat or go down across a restart: the real history renumbered that way is
    still clean, where comparing numbers across the restart would report stale commits."""
    events = load(t3g_result.history_path)
    restart_ns = _first_restart_ns(events)
    before = max(
        e.op.generation
        for e in events
        if e.type == OK
        and isinstance(e.op, Assign)
        and e.op.generation is not None
        and e.time_ns < restart_ns
    )
    # Lower every later number by the smallest one committed after the restart: it becomes
    # 0, below `before`, whatever the rebalances made of the numbers (lowering by `before`
    # missed when the group rebalanced past 2 * before before its first commit).
    by = min(
        e.op.generation
        for e in events
        if e.type == OK and isinstance(e.op, Commit) and e.time_ns > restart_ns
    )
    lowered = [_generation_lowered(e, restart_ns, by) for e in events]
    assert any(
        e.type == OK and isinstance(e.op, Commit) and 0 <= e.op.generation < before
        for e in lowered
        if e.time_ns > restart_ns
    ), "no post-restart commit numbered below a pre-restart generation"
    report = check(lowered)
    assert report.valid, report.text()


def test_a_pre_restart_member_is_refused_when_its_generation_number_comes_back(tmp_path):
    """The worst case of T3g, scripted: generation 2 is handed out, never committed with,
    and the gateway is killed; the restarted coordinator counts on from generation 1 (the
    newest committed) and hands 2 out again. The pre-restart member of generation 2 is
    refused (40911: membership is not durable), before and after the number comes back."""
    recorder = Recorder(tmp_path / "history.jsonl")
    cluster = Cluster(tmp_path / "data", recorder)

    def member(name: str) -> GroupMember:
        return GroupMember(name, cluster.endpoint, recorder, "g", "gen")

    try:
        create_topic(cluster.endpoint.url, "gen", 1)
        first, zombie = member("first"), member("zombie")
        first.join()
        assert first.generation == 1 and first.commit(0, 0)
        first.leave()  # the group is empty, still at generation 1
        zombie.join()
        assert zombie.generation == 2  # never committed with
        cluster.kill_and_restart()
        assert not zombie.commit(0, 0)
        successor = member("successor")
        successor.join()
        assert successor.generation == zombie.generation  # the number comes back
        assert not zombie.commit(0, 0) and successor.commit(0, 0)
    finally:
        cluster.stop()
        recorder.close()
    assert commits_without_rejoin(recorder.events) == {"refused:40911": 2}
    report = check(recorder.events)
    assert report.valid, report.text()


def test_t4_retention_and_compaction_during_traffic(tmp_path):
    """T4: offsets keep their values, a fetch below the log start is 416, the latest value of
    each key survives compaction, no produce fails."""
    result = run_t4(seed=3, ops=600, jobs_every_s=1.0, duration_s=40, workdir=tmp_path)
    assert result.valid, result.text()
    assert result.figures["probes below log start"].get("416", 0) >= 1, result.text()
    assert result.faults["job"] >= 4
    assert result.report.operations[("send", "ok")] == 600


def test_tk_librdkafka_idempotent_producers_survive_kill_9_restarts(tmp_path):
    """TK: T1's kill -9 + restarts with Kafka's own client on the Kafka listener (the port
    kept across restarts): no acked record lost or written twice, the drain sees them all."""
    result = run_tk(
        seed=7,
        ops=600,
        kill_every_s=(1.5, 3.0),
        kills_min=2,
        duration_s=40,
        workdir=tmp_path,
    )
    assert result.report.valid, result.text()
    assert result.faults["kill"] >= 2, result.text()
    assert result.report.operations[("send", "ok")] >= 200, result.text()
    assert result.recovery_ms and max(result.recovery_ms) < 30_000, result.text()
