"""The Jepsen-style checker on hand-written histories: each anomaly is found with the right
example, clean histories (retries, seeks, rebalances, compaction) give none, and every kept
failing history in fixtures/ is flagged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chaos.check import compacted_topics
from chaos.checker import ANOMALY_KINDS, check
from chaos.history import (
    FAIL,
    INFO,
    OK,
    Assign,
    Commit,
    Event,
    Fault,
    Poll,
    Recorder,
    Send,
    dump,
    load,
)

FIXTURES = Path(__file__).parent / "fixtures"
T = "t"


class History:
    """Builds a history one operation at a time (invoke then completion, increasing time)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.time_ns = 0
        self.op_id = 0

    def _op(self, process: str, invoked, kind: str, done) -> History:
        self.op_id += 1
        self.time_ns += 10
        self.events.append(Event("invoke", self.op_id, process, self.time_ns, invoked))
        self.time_ns += 10
        self.events.append(Event(kind, self.op_id, process, self.time_ns, done))
        return self

    def send(self, value, offset=None, kind=OK, *, key=None, pid=None, seq=None, process="p0"):
        op = Send(T, 0, value, key=key, producer_id=pid, producer_epoch=0, sequence=seq)
        done = Send(T, 0, value, key=key, producer_id=pid, producer_epoch=0, sequence=seq)
        if kind == OK:
            done = Send(T, 0, value, key, pid, 0, seq, offset=offset)
        elif kind == FAIL:
            done = Send(T, 0, value, key, pid, 0, seq, error="40401")
        return self._op(process, op, kind, done)

    def poll(self, records, *, consumer="c0", mode="assign", start=None, final=False, group=None):
        positions = () if start is None else ((T, 0, start),)
        got = tuple((T, 0, offset, value) for offset, value in records)
        invoked = Poll(consumer, mode, group, positions, final=final)
        return self._op(consumer, invoked, OK, Poll(consumer, mode, group, positions, got, final))

    def seek(self, offset, *, consumer="c0", mode="assign", group=None, generation=None):
        op = Assign(consumer, mode, group, generation, ((T, 0, offset),))
        return self._op(consumer, op, OK, op)

    def commit(self, offset, *, group="g", generation=1, member="m1", kind=OK):
        op = Commit(group, T, 0, offset, generation, member)
        return self._op(member, op, kind, op)

    def compacted(self) -> History:
        """Declares topic T compacted, as the scenarios do (chaos.check reads it)."""
        op = Fault("config", f"compacted:{T}")
        return self._op("nemesis", op, INFO, op)

    def acked(self, *values) -> History:
        for offset, value in enumerate(values):
            self.send(value, offset)
        return self

    def drain(self, records, start=0) -> History:
        return self.poll(records, consumer="drain", start=start, final=True)


def clean_history() -> History:
    history = History().acked("a", "b", "c")
    history.poll([(0, "a")], start=0).poll([(1, "b"), (2, "c")])
    return history.drain([(0, "a"), (1, "b"), (2, "c")])


# ---- every anomaly kind, each with its example ------------------------------------------------


def inconsistent_offsets() -> History:
    return History().send("a", 0).send("b", 0).drain([(0, "a")])


def duplicate() -> History:
    history = History().send("a", kind=INFO).send("a", 0).send("a", 1)  # retried, written twice
    return history.drain([(0, "a"), (1, "a")])


def lost_write() -> History:
    return History().acked("a", "b", "c").drain([(0, "a"), (2, "c")])


def unseen() -> History:
    return History().acked("a", "b").drain([(0, "a")])


def aborted_read() -> History:
    return History().send("a", 0).send("x", kind=FAIL).drain([(0, "a"), (1, "x")])


def poll_skip() -> History:
    history = History().acked("a", "b", "c")
    history.poll([(0, "a")], start=0).poll([(2, "c")])
    return history.drain([(0, "a"), (1, "b"), (2, "c")])


def nonmonotonic_poll() -> History:
    history = History().acked("a", "b")
    history.poll([(0, "a"), (1, "b")], start=0).poll([(0, "a")])
    return history.drain([(0, "a"), (1, "b")])


def nonmonotonic_send() -> History:
    history = History().send("a", 1, pid=7, seq=0).send("b", 0, pid=7, seq=1)
    return history.drain([(0, "b"), (1, "a")])


def offset_gap() -> History:
    return History().send("a", 0).send("c", 2).drain([(0, "a"), (2, "c")])


def compaction_lost() -> History:
    history = History().compacted().send("a", 0, key="k").send("b", 1, key="k")
    return history.drain([(0, "a")])


def commit_regress() -> History:
    history = History().acked("a", "b", "c")
    history.poll([(0, "a"), (1, "b"), (2, "c")], group="g", start=0)
    return history.commit(3).commit(1, member="m2")


def commit_beyond_processed() -> History:
    history = History().acked("a", "b", "c")
    return history.poll([(0, "a")], group="g", start=0).commit(3)


def commit_unprocessed() -> History:
    history = History().acked("a", "b", "c")
    history.poll([(0, "a")], group="g", mode="subscribe", start=0)
    history.poll([(2, "c")], group="g", mode="subscribe")  # skipped b: allowed in subscribe
    return history.commit(3)


def stale_commit() -> History:
    history = History().acked("a")
    history.seek(None, consumer="m1", mode="subscribe", group="g", generation=1)
    history.poll([(0, "a")], consumer="m1", group="g", mode="subscribe", start=0)
    history.seek(None, consumer="m2", mode="subscribe", group="g", generation=2)
    return history.commit(1, generation=1, member="m1")  # accepted although generation 2 exists


CASES = {
    "inconsistent-offsets": (inconsistent_offsets, {"offset": 0, "values": ["a", "b"]}),
    "duplicate": (duplicate, {"value": "a"}),
    "lost-write": (lost_write, {"offset": 1, "value": "b", "max_polled_offset": 2}),
    "unseen": (unseen, {"offset": 1, "value": "b"}),
    "aborted-read": (aborted_read, {"offset": 1, "value": "x", "error": "40401"}),
    "poll-skip": (poll_skip, {"consumer": "c0", "expected": 1, "got": 2, "skipped": [1]}),
    "nonmonotonic-poll": (nonmonotonic_poll, {"consumer": "c0", "expected": 2, "got": 0}),
    "nonmonotonic-send": (nonmonotonic_send, {"later": {"order": 1, "offset": 0, "value": "b"}}),
    "offset-gap": (offset_gap, {"after": 0, "next": 2}),
    "compaction-lost": (compaction_lost, {"record_key": "k", "offset": 1, "value": "b"}),
    "commit-regress": (commit_regress, {"offset": 1, "earlier_max": 3}),
    "commit-beyond-processed": (commit_beyond_processed, {"offset": 3, "max_processed": 0}),
    "commit-unprocessed": (commit_unprocessed, {"final_commit": 3, "missing": [1]}),
    "stale-commit": (stale_commit, {"generation": 1, "newer": 2}),
}


def test_every_anomaly_kind_has_a_case():
    assert set(CASES) == set(ANOMALY_KINDS)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_anomaly_is_found_with_its_example(kind):
    """The history built for `kind` is invalid, and its first example names the culprit."""
    build, expected = CASES[kind]
    events = build().events
    report = check(events, compacted=compacted_topics(events))
    assert not report.valid
    assert report.count(kind) >= 1, report.text()
    example = report.anomalies[kind][0]
    assert {name: example[name] for name in expected} == expected, example


def test_a_clean_history_has_no_anomaly():
    report = check(clean_history().events)
    assert report.valid, report.text()
    assert report.operations[("send", "ok")] == 3 and report.operations[("poll", "ok")] == 3


def test_retried_info_sends_resolved_once_are_clean():
    """An indeterminate send retried with the same value and acked once is fine."""
    history = History().send("a", kind=INFO).send("a", kind=INFO).send("a", 0).send("b", 1)
    history.send("c", kind=INFO)  # never resolved, never seen: allowed
    report = check(history.drain([(0, "a"), (1, "b")]).events)
    assert report.valid, report.text()


def test_an_idempotent_retry_acked_twice_at_one_offset_is_clean():
    history = History().send("a", 0, pid=1, seq=0).send("a", 0, pid=1, seq=0)
    history.send("b", 1, pid=1, seq=1)
    assert check(history.drain([(0, "a"), (1, "b")]).events).valid


def test_a_seek_resets_the_expected_position():
    """Assign mode is strict, but an explicit seek (an assign event) is not a skip."""
    history = History().acked("a", "b", "c")
    history.poll([(0, "a")], start=0).seek(2).poll([(2, "c")]).seek(0).poll([(0, "a")])
    assert check(history.drain([(0, "a"), (1, "b"), (2, "c")]).events).valid


def test_subscribe_mode_skips_and_rewinds_are_allowed_not_anomalies():
    history = History().acked("a", "b", "c")
    history.poll([(0, "a")], mode="subscribe", start=0).poll([(2, "c")], mode="subscribe")
    history.poll([(1, "b")], mode="subscribe")
    report = check(history.drain([(0, "a"), (1, "b"), (2, "c")]).events)
    assert report.valid, report.text()
    assert report.allowed.keys() >= {"poll-skip", "nonmonotonic-poll"}


def test_retention_exempts_writes_below_the_log_start():
    """A final read from the log start (2) does not report 0 and 1 as lost or unseen."""
    history = History().acked("a", "b", "c", "d")
    assert check(history.drain([(2, "c"), (3, "d")], start=2).events).valid


def test_compaction_keeps_the_latest_value_per_key():
    """Older values of a key may vanish from a compacted topic, and offsets may have gaps."""
    history = History().send("a", 0, key="k").send("x", 1, key="j").send("b", 2, key="k")
    history.poll([(0, "a")], start=0).poll([(1, "x"), (2, "b")])
    report = check(history.drain([(1, "x"), (2, "b")]).events, compacted={T})
    assert report.valid, report.text()


def test_group_commits_in_order_within_processed_are_clean():
    history = History().acked("a", "b", "c")
    history.seek(None, consumer="m1", mode="subscribe", group="g", generation=1)
    history.poll([(0, "a"), (1, "b")], consumer="m1", group="g", mode="subscribe", start=0)
    history.commit(2)
    history.seek(None, consumer="m2", mode="subscribe", group="g", generation=2)
    history.commit(2, generation=1, kind=FAIL)  # the stale commit rejected: fine
    history.poll([(2, "c")], consumer="m2", group="g", mode="subscribe", start=2)
    history.commit(3, generation=2, member="m2")
    report = check(history.drain([(0, "a"), (1, "b"), (2, "c")]).events)
    assert report.valid, report.text()


def test_recorder_writes_jsonl_that_loads_back(tmp_path):
    path = tmp_path / "history.jsonl"
    recorder = Recorder(path)
    op_id = recorder.invoke("p0", Send(T, 0, "a", producer_id=1, producer_epoch=0, sequence=0))
    recorder.complete(OK, op_id, "p0", Send(T, 0, "a", None, 1, 0, 0, offset=0))
    poll = Poll("c0", positions=((T, 0, 0),), records=((T, 0, 0, "a"),), final=True)
    recorder.complete(OK, recorder.invoke("c0", poll), "c0", poll)
    recorder.fault("kill", "gateway")
    recorder.close()
    loaded = load(path)
    assert loaded == recorder.events
    assert [e.op_id for e in loaded] == [1, 1, 2, 2, 3, 3]
    assert [e.time_ns for e in loaded] == sorted(e.time_ns for e in loaded)
    assert check(loaded).valid


# ---- kept failing histories -------------------------------------------------------------------


def write_fixtures() -> None:
    """Regenerates fixtures/<kind>.jsonl from CASES (run by hand when a case changes)."""
    FIXTURES.mkdir(exist_ok=True)
    for kind, (build, _) in CASES.items():
        dump(build().events, FIXTURES / f"{kind}.jsonl")


FIXTURE_FILES = sorted(FIXTURES.glob("*.jsonl"))


def test_fixtures_cover_every_anomaly_kind():
    assert {path.stem for path in FIXTURE_FILES} >= set(ANOMALY_KINDS)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_each_kept_failing_history_is_flagged(path):
    """A fixture named after a kind (`<kind>[.<what>].jsonl`) is flagged with it."""
    kind = path.stem.split(".")[0]
    events = load(path)
    report = check(events, compacted=compacted_topics(events))
    if kind in ANOMALY_KINDS:
        assert report.count(kind) >= 1, report.text()
    assert not report.valid, report.text()


def test_the_command_line_exits_1_on_anomalies_and_0_when_clean(tmp_path):
    clean = tmp_path / "clean.jsonl"
    dump(clean_history().events, clean)
    command = [sys.executable, "-m", "chaos.check"]
    good = subprocess.run([*command, str(clean)], capture_output=True, text=True)
    assert good.returncode == 0 and "valid" in good.stdout, good.stdout + good.stderr
    bad = subprocess.run([*command, str(FIXTURES / "lost-write.jsonl")], capture_output=True)
    assert bad.returncode == 1 and b"lost-write" in bad.stdout
