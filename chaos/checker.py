"""Jepsen's Kafka queue checker (`jepsen.tests.kafka`), ported to lakelog histories.

A key is a topic partition; every sent value is unique, so a value names one logical write.
`check(events)` returns a `Report`: per anomaly kind a count and a few examples. Kinds:

- `inconsistent-offsets`: two values at one (key, offset), over sends and polls.
- `duplicate`: one value at two offsets (also an `info` send retried and written twice).
- `lost-write`: an acked send at offset a never polled, though a poll of its key saw b > a.
- `unseen`: acked, never polled by the final drain (or by anyone, without a drain).
- `aborted-read` (G1a): a polled value whose every send attempt failed definitively.
- `poll-skip` / `nonmonotonic-poll`: a consumer's consecutive polls of a key jump over a known
  offset / go back or repeat. Strict in assign mode; in subscribe mode Kafka allows both (a
  rebalance resets positions), so they are reported under `allowed`, not as anomalies.
- `nonmonotonic-send`: one producer's sends to a key land in an order other than their
  sequence order.
- `offset-gap`: a hole in the final full read of a key (non-compacted topics only).
- `compaction-lost`: the latest acked value of a record key is missing from the final read of a
  compacted topic (Kafka keeps at least the last value per key).
- Group commits: `commit-regress` (a commit below one that completed before it started),
  `commit-beyond-processed` (above the group's max polled offset + 1), `commit-unprocessed`
  (an offset below the final commit never polled by the group), `stale-commit` (a commit of
  generation g accepted after a member of the group joined generation > g, or accepted after a
  gateway restart from a member that had not joined again since).

Gateway restarts (`fault` events of kind `restart`): lakelog keeps group membership in the
coordinator's memory, so a restart ends every generation, and the restarted coordinator counts
generations on from the newest one stored with a committed offset: a number handed out before
the kill but never committed with may be handed out again. Generation numbers are therefore
compared only within one gateway lifetime (a join by its completion, a commit by its invoke,
both against the restart events), and across a restart a commit needs a join since it.

Retention: writes below a key's log start (the first position of its final read) are exempt
from lost-write and unseen. Compacted keys (`compacted` topics) are exempt from lost-write,
unseen, poll-skip and offset-gap, and checked by compaction-lost instead.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from chaos.history import (
    FAIL,
    GATEWAY_RESTART,
    MODE_SUBSCRIBE,
    OK,
    Assign,
    Commit,
    Event,
    Fault,
    Poll,
    Send,
    operations,
)

Key = tuple[str, int]
EXAMPLES_MAX = 5
ANOMALY_KINDS = (
    "inconsistent-offsets",
    "duplicate",
    "lost-write",
    "unseen",
    "aborted-read",
    "poll-skip",
    "nonmonotonic-poll",
    "nonmonotonic-send",
    "offset-gap",
    "compaction-lost",
    "commit-regress",
    "commit-beyond-processed",
    "commit-unprocessed",
    "stale-commit",
)


@dataclass
class Report:
    """What `check` found: anomalies fail a run, `allowed` ones are what Kafka permits."""

    operations: Counter = field(default_factory=Counter)  # (f, outcome) -> count
    anomalies: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    allowed: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))

    @property
    def valid(self) -> bool:
        return not any(self.anomalies.values())

    def count(self, kind: str) -> int:
        return len(self.anomalies.get(kind, ()))

    def add(self, kind: str, example: dict, *, allowed: bool = False) -> None:
        (self.allowed if allowed else self.anomalies)[kind].append(example)

    def summary(self) -> dict:
        """Counts per kind and the first few examples, JSON-ready."""
        return {
            "valid": self.valid,
            "operations": {f"{f}:{o}": n for (f, o), n in sorted(self.operations.items())},
            "anomalies": {
                kind: {"count": len(found), "examples": found[:EXAMPLES_MAX]}
                for kind, found in sorted(self.anomalies.items())
                if found
            },
            "allowed": {kind: len(found) for kind, found in sorted(self.allowed.items()) if found},
        }

    def text(self) -> str:
        lines = ["operations:"]
        for (f, outcome), n in sorted(self.operations.items()):
            lines.append(f"  {f:8} {outcome:6} {n}")
        found = {kind: items for kind, items in self.anomalies.items() if items}
        lines.append(f"anomalies: {sum(len(v) for v in found.values())}")
        for kind in sorted(found):
            lines.append(f"  {kind}: {len(found[kind])}")
            lines.extend(f"    e.g. {example}" for example in found[kind][:EXAMPLES_MAX])
        for kind, items in sorted(self.allowed.items()):
            if items:
                lines.append(f"allowed (subscribe mode) {kind}: {len(items)}")
        lines.append("valid" if self.valid else "INVALID")
        return "\n".join(lines)


@dataclass
class _Facts:
    """Indexes over one history, built once."""

    acked: dict[str, tuple[Key, int]] = field(default_factory=dict)  # value -> first ack
    send_of: dict[str, Send] = field(default_factory=dict)
    outcomes: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    positions: dict[str, set[tuple[Key, int]]] = field(default_factory=lambda: defaultdict(set))
    at: dict[Key, dict[int, set[str]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(set))
    )
    polled: dict[str, set[tuple[Key, int]]] = field(default_factory=lambda: defaultdict(set))
    final: dict[Key, list[int]] = field(default_factory=lambda: defaultdict(list))
    final_values: set[str] = field(default_factory=set)
    log_start: dict[Key, int] = field(default_factory=dict)
    has_final: bool = False
    ok_polls: list[Event] = field(default_factory=list)
    ok_assigns: list[Event] = field(default_factory=list)
    sends_ok: list[Event] = field(default_factory=list)
    commits: list[tuple[Event, Event]] = field(default_factory=list)
    version: dict[Key, list[int]] = field(default_factory=dict)  # sorted known offsets
    restarts: list[int] = field(default_factory=list)  # time_ns of gateway restarts, sorted


def check(
    events: Iterable[Event], *, compacted: Iterable[str] = (), examples_max: int = 1000
) -> Report:
    """Checks a history; `compacted` names the topics with cleanup.policy=compact."""
    compacted_topics = frozenset(compacted)
    report = Report()
    facts = _index(list(events), report)
    _offsets(facts, report)
    _lost_and_unseen(facts, report, compacted_topics)
    _aborted(facts, report)
    _polls(facts, report, compacted_topics)
    _sends(facts, report)
    _gaps(facts, report, compacted_topics)
    _compaction(facts, report, compacted_topics)
    _commits(facts, report)
    for kind in list(report.anomalies):
        report.anomalies[kind] = report.anomalies[kind][:examples_max]
    return report


def _index(events: list[Event], report: Report) -> _Facts:
    facts = _Facts()
    for invoke, done in operations(events):
        outcome = "open" if done is None else done.type
        report.operations[(invoke.f, outcome)] += 1
        if done is None:
            continue
        op = done.op
        if isinstance(op, Send):
            facts.send_of.setdefault(op.value, op)
            facts.outcomes[op.value].add(done.type)
            if done.type == OK and op.offset is not None:
                key = (op.topic, op.partition)
                facts.acked.setdefault(op.value, (key, op.offset))
                facts.positions[op.value].add((key, op.offset))
                facts.at[key][op.offset].add(op.value)
                facts.sends_ok.append(done)
        elif isinstance(op, Poll) and done.type == OK:
            facts.ok_polls.append(done)
            _index_poll(facts, op)
        elif isinstance(op, Assign) and done.type == OK:
            facts.ok_assigns.append(done)
        elif isinstance(op, Commit):
            facts.commits.append((invoke, done))
        elif isinstance(op, Fault) and op.kind == GATEWAY_RESTART:
            facts.restarts.append(invoke.time_ns)
    facts.restarts.sort()
    facts.version = {key: sorted(offsets) for key, offsets in facts.at.items()}
    facts.ok_polls.sort(key=lambda e: e.time_ns)
    return facts


def _index_poll(facts: _Facts, op: Poll) -> None:
    for topic, partition, offset, value in op.records:
        key = (topic, partition)
        facts.positions[value].add((key, offset))
        facts.polled[value].add((key, offset))
        facts.at[key][offset].add(value)
        if op.final:
            facts.final[key].append(offset)
            facts.final_values.add(value)
    if op.final:
        facts.has_final = True
        for topic, partition, offset in op.positions:
            key = (topic, partition)
            facts.log_start[key] = min(offset, facts.log_start.get(key, offset))


def _offsets(facts: _Facts, report: Report) -> None:
    for key, by_offset in sorted(facts.at.items()):
        for offset, values in sorted(by_offset.items()):
            if len(values) > 1:
                report.add(
                    "inconsistent-offsets",
                    {"key": list(key), "offset": offset, "values": sorted(values)},
                )
    for value, places in sorted(facts.positions.items()):
        if len(places) > 1:
            report.add("duplicate", {"value": value, "at": sorted([list(k), o] for k, o in places)})


def _lost_and_unseen(facts: _Facts, report: Report, compacted: frozenset[str]) -> None:
    max_polled: dict[Key, int] = {}
    for places in facts.polled.values():
        for key, offset in places:
            max_polled[key] = max(offset, max_polled.get(key, -1))
    for value, (key, offset) in sorted(facts.acked.items(), key=lambda item: item[1]):
        if key[0] in compacted or offset < facts.log_start.get(key, 0):
            continue
        example = {"key": list(key), "offset": offset, "value": value}
        if value not in facts.polled and offset < max_polled.get(key, -1):
            report.add("lost-write", {**example, "max_polled_offset": max_polled[key]})
        elif (facts.has_final and value not in facts.final_values) or value not in facts.polled:
            report.add("unseen", example)


def _aborted(facts: _Facts, report: Report) -> None:
    for value, places in sorted(facts.polled.items()):
        if facts.outcomes.get(value) == {FAIL}:
            send = facts.send_of[value]
            key, offset = min(places)
            report.add(
                "aborted-read",
                {"key": list(key), "offset": offset, "value": value, "error": send.error},
            )


def _polls(facts: _Facts, report: Report, compacted: frozenset[str]) -> None:
    """Per consumer: each poll continues where the last one (or the last seek) left off."""
    stream = sorted(facts.ok_polls + facts.ok_assigns, key=lambda e: e.time_ns)
    expected: dict[str, dict[Key, int]] = defaultdict(dict)
    for event in stream:
        op = event.op
        if isinstance(op, Assign):
            positions = expected[op.consumer]
            positions.clear()  # a seek or a rebalance: positions restart
            for topic, partition, offset in op.partitions:
                if offset is not None:
                    positions[(topic, partition)] = offset
            continue
        allowed = op.mode == MODE_SUBSCRIBE
        positions = expected[op.consumer]
        for topic, partition, offset in op.positions:
            positions.setdefault((topic, partition), offset)
        for topic, partition, offset, value in op.records:
            key = (topic, partition)
            want = positions.get(key)
            positions[key] = offset + 1
            if want is None:
                continue
            example = {"consumer": op.consumer, "key": list(key), "expected": want, "got": offset}
            if offset < want:
                report.add("nonmonotonic-poll", {**example, "value": value}, allowed=allowed)
            elif offset > want and topic not in compacted:
                skipped = _known_between(facts.version.get(key, []), want, offset)
                if skipped:
                    report.add("poll-skip", {**example, "skipped": skipped[:5]}, allowed=allowed)


def _known_between(offsets: list[int], low: int, high: int) -> list[int]:
    return offsets[bisect.bisect_left(offsets, low) : bisect.bisect_left(offsets, high)]


def _sends(facts: _Facts, report: Report) -> None:
    """A producer's sends to one key land in sequence order (by completion without ids)."""
    by_producer: dict[tuple, list[tuple[int, int, str]]] = defaultdict(list)
    for event in facts.sends_ok:
        op = event.op
        key = (op.topic, op.partition)
        if op.producer_id is not None and op.sequence is not None:
            producer = (op.producer_id, op.producer_epoch, key)
            by_producer[producer].append((op.sequence, op.offset, op.value))
        else:
            by_producer[(event.process, key)].append((event.time_ns, op.offset, op.value))
    for producer, sends in sorted(by_producer.items(), key=lambda item: str(item[0])):
        sends.sort()
        seen: dict[str, int] = {}
        previous = None
        for order, offset, value in sends:
            if value in seen:
                continue  # a retried send acked twice at one offset is not a reordering
            seen[value] = offset
            if previous is not None and offset <= previous[1]:
                report.add(
                    "nonmonotonic-send",
                    {
                        "producer": [str(part) for part in producer],
                        "earlier": {"order": previous[0], "offset": previous[1]},
                        "later": {"order": order, "offset": offset, "value": value},
                    },
                )
            previous = (order, offset)


def _gaps(facts: _Facts, report: Report, compacted: frozenset[str]) -> None:
    for key, offsets in sorted(facts.final.items()):
        if key[0] in compacted:
            continue
        ordered = sorted(set(offsets))
        for low, high in zip(ordered, ordered[1:], strict=False):
            if high != low + 1:
                report.add("offset-gap", {"key": list(key), "after": low, "next": high})


def _compaction(facts: _Facts, report: Report, compacted: frozenset[str]) -> None:
    if not facts.has_final:
        return
    latest: dict[tuple[Key, str], tuple[int, str]] = {}
    for value, (key, offset) in facts.acked.items():
        send = facts.send_of[value]
        if key[0] not in compacted or send.key is None:
            continue
        current = latest.get((key, send.key))
        if current is None or offset > current[0]:
            latest[(key, send.key)] = (offset, value)
    for (key, record_key), (offset, value) in sorted(latest.items()):
        if value not in facts.final_values:
            report.add(
                "compaction-lost",
                {"key": list(key), "record_key": record_key, "offset": offset, "value": value},
            )


class _PrefixMax:
    """The max of values whose time is below a bound, over (time_ns, value) pairs."""

    def __init__(self, pairs: list[tuple[int, int]]) -> None:
        pairs = sorted(pairs)
        self.times = [t for t, _ in pairs]
        self.maxima: list[int] = []
        for _, value in pairs:
            self.maxima.append(max(value, self.maxima[-1]) if self.maxima else value)

    def before(self, time_ns: int, default: int = -1) -> int:
        index = bisect.bisect_left(self.times, time_ns)
        return self.maxima[index - 1] if index else default


@dataclass(frozen=True)
class _Lifetimes:
    """Gateway lifetimes (0 before the first restart, then one per restart) and when each
    group member joined, to tell which lifetime a generation belongs to."""

    restarts: list[int]  # time_ns, sorted
    joins: dict[str, list[int]]  # consumer -> completion times of its ok group joins, sorted

    def of(self, time_ns: int) -> int:
        return bisect.bisect_right(self.restarts, time_ns)

    def joined_before_restart(self, consumer: str, invoke_ns: int) -> bool:
        """The consumer's last join before `invoke_ns` was in an earlier gateway lifetime."""
        times = self.joins.get(consumer, [])
        index = bisect.bisect_left(times, invoke_ns)
        return index > 0 and self.of(times[index - 1]) < self.of(invoke_ns)


def _lifetimes(facts: _Facts) -> _Lifetimes:
    joins: dict[str, list[int]] = defaultdict(list)
    for event in facts.ok_assigns:
        if event.op.group is not None and event.op.generation is not None:
            joins[event.op.consumer].append(event.time_ns)
    return _Lifetimes(facts.restarts, {c: sorted(times) for c, times in joins.items()})


def commits_without_rejoin(events: Iterable[Event]) -> Counter:
    """Outcomes of the group commits sent after a gateway restart by members that had not
    joined again since (pre-restart generations): each must be refused, `ok` is a
    stale-commit."""
    facts = _index(list(events), Report())
    lifetimes = _lifetimes(facts)
    outcomes: Counter = Counter()
    for invoke, done in facts.commits:
        if invoke.op.generation >= 0 and lifetimes.joined_before_restart(
            invoke.process, invoke.time_ns
        ):
            error = "open" if done is None else done.op.error
            outcomes["ok" if done is not None and done.type == OK else f"refused:{error}"] += 1
    return outcomes


def _commits(facts: _Facts, report: Report) -> None:
    polled: dict[tuple[str, Key], list[tuple[int, int]]] = defaultdict(list)
    for event in facts.ok_polls:
        if event.op.group is None:
            continue
        for topic, partition, offset, _ in event.op.records:
            polled[(event.op.group, (topic, partition))].append((event.time_ns, offset))
    lifetimes = _lifetimes(facts)
    generations: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for event in facts.ok_assigns:
        if event.op.group is not None and event.op.generation is not None:
            lifetime = lifetimes.of(event.time_ns)
            generations[(event.op.group, lifetime)].append((event.time_ns, event.op.generation))
    newest = {key: _PrefixMax(pairs) for key, pairs in generations.items()}
    committed: dict[tuple[str, Key], list[tuple[Event, Event]]] = defaultdict(list)
    for invoke, done in facts.commits:
        if done is not None and done.type == OK:
            committed[(done.op.group, (done.op.topic, done.op.partition))].append((invoke, done))
    for (group, key), pairs in sorted(committed.items()):
        completed = _PrefixMax([(d.time_ns, d.op.offset) for _, d in pairs])
        processed = _PrefixMax(polled[(group, key)])
        for invoke, done in pairs:
            _check_commit(report, invoke, done, completed, processed)
            lifetime = lifetimes.of(invoke.time_ns)
            _check_generation(report, invoke, done, newest.get((group, lifetime)), lifetimes)
        final = max(d.op.offset for _, d in pairs)
        seen = {offset for _, offset in polled[(group, key)]}
        missing = [o for o in _known_between(facts.version.get(key, []), 0, final) if o not in seen]
        if missing:
            report.add(
                "commit-unprocessed",
                {"group": group, "key": list(key), "final_commit": final, "missing": missing[:10]},
            )


def _example(done: Event) -> dict:
    op = done.op
    return {
        "group": op.group,
        "key": [op.topic, op.partition],
        "offset": op.offset,
        "op_id": done.op_id,
    }


def _check_commit(
    report: Report, invoke: Event, done: Event, completed: _PrefixMax, processed: _PrefixMax
) -> None:
    op, example = done.op, _example(done)
    earlier_max = completed.before(invoke.time_ns)
    if op.offset < earlier_max:
        report.add("commit-regress", {**example, "earlier_max": earlier_max})
    max_processed = processed.before(done.time_ns)
    if op.offset > max_processed + 1:
        report.add("commit-beyond-processed", {**example, "max_processed": max_processed})


def _check_generation(
    report: Report, invoke: Event, done: Event, newest: _PrefixMax | None, lifetimes: _Lifetimes
) -> None:
    """Stale: an older generation of this gateway lifetime, or one of an earlier lifetime."""
    generation = done.op.generation
    if generation < 0:
        return  # outside any generation (an admin reset): no member to fence
    example = {**_example(done), "generation": generation}
    newer = -1 if newest is None else newest.before(invoke.time_ns)
    if newer > generation:
        report.add("stale-commit", {**example, "newer": newer})
    elif lifetimes.joined_before_restart(invoke.process, invoke.time_ns):
        report.add("stale-commit", {**example, "joined_before_restart": True})
