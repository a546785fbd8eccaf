"""The history model: every client operation as an invoke event and one completion event.

A history is a JSONL file, one event a line. An operation starts with `invoke` and ends with
exactly one of `ok` (it happened), `fail` (it definitely did not happen) or `info` (unknown:
a timeout, a dropped connection, a 5xx). Events carry a process-unique `op_id`, the client
`process` that ran it and a monotonic `time_ns`. Nemesis actions are `fault` operations.

Operations (the `f` of an event, Jepsen's vocabulary):
- `send`: one record to one topic partition, with the idempotent producer fields; `ok` carries
  the acknowledged offset.
- `poll`: one fetch by a consumer; `ok` carries the records as (topic, partition, offset, value).
- `commit`: a group's committed offset (next offset to read) for one partition.
- `assign`: a consumer gets partitions (assign mode: an explicit seek; subscribe mode: a join
  or rebalance, with the group generation).
- `fault`: the nemesis killed or restarted something.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
EVENT_TYPES = (INVOKE, OK, FAIL, INFO)
MODE_ASSIGN, MODE_SUBSCRIBE = "assign", "subscribe"
# Fault kinds of the gateway process. The checker reads restarts: group membership lives in the
# coordinator's memory, so a restart ends every member's generation.
GATEWAY_KILL, GATEWAY_RESTART = "kill", "restart"


@dataclass(frozen=True, slots=True)
class Send:
    """One record sent to (topic, partition); values are unique across a history."""

    topic: str
    partition: int
    value: str
    key: str | None = None
    producer_id: int | None = None
    producer_epoch: int | None = None
    sequence: int | None = None
    offset: int | None = None  # set on ok
    error: str | None = None  # set on fail/info


@dataclass(frozen=True, slots=True)
class Poll:
    """One fetch; `positions` are the offsets asked for, `records` what came back."""

    consumer: str
    mode: str = MODE_ASSIGN
    group: str | None = None
    positions: tuple[tuple[str, int, int], ...] = ()  # (topic, partition, from_offset)
    records: tuple[tuple[str, int, int, str], ...] = ()  # (topic, partition, offset, value)
    final: bool = False  # part of the final full read (the drain)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Commit:
    """A group commits `offset` (the next offset to read) for one partition."""

    group: str
    topic: str
    partition: int
    offset: int
    generation: int
    member: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Assign:
    """A consumer starts reading partitions, at `offset` when it seeks (None: committed)."""

    consumer: str
    mode: str = MODE_ASSIGN
    group: str | None = None
    generation: int | None = None
    partitions: tuple[tuple[str, int, int | None], ...] = ()  # (topic, partition, offset)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Fault:
    """A nemesis action: `kind` is e.g. kill, restart, job; `detail` says on what."""

    kind: str
    detail: str = ""


Op = Send | Poll | Commit | Assign | Fault
OP_TYPES: dict[str, type] = {
    "send": Send,
    "poll": Poll,
    "commit": Commit,
    "assign": Assign,
    "fault": Fault,
}
F_OF: dict[type, str] = {cls: name for name, cls in OP_TYPES.items()}
_TUPLE_FIELDS = {"positions", "records", "partitions"}


@dataclass(frozen=True, slots=True)
class Event:
    """One line of a history."""

    type: str  # invoke | ok | fail | info
    op_id: int
    process: str
    time_ns: int
    op: Op = field(repr=True)

    @property
    def f(self) -> str:
        return F_OF[type(self.op)]

    def to_json(self) -> str:
        body = {
            "type": self.type,
            "f": self.f,
            "op_id": self.op_id,
            "process": self.process,
            "time_ns": self.time_ns,
            "value": asdict(self.op),
        }
        return json.dumps(body, separators=(",", ":"))

    @staticmethod
    def from_json(line: str) -> Event:
        body = json.loads(line)
        if body["type"] not in EVENT_TYPES:
            raise ValueError(f"unknown event type {body['type']!r}")
        values: dict[str, Any] = dict(body["value"])
        for name in _TUPLE_FIELDS & values.keys():
            values[name] = tuple(tuple(item) for item in values[name])
        op = OP_TYPES[body["f"]](**values)
        return Event(body["type"], body["op_id"], body["process"], body["time_ns"], op)


class Recorder:
    """Appends events to a JSONL file (or only to memory with `path=None`).

    Thread-safe: one lock orders the op id counter, the clock reading and the write, so the
    file's line order is the `time_ns` order. Each line is flushed as it is written: a crash of
    the test run keeps everything recorded so far.
    """

    def __init__(self, path: Path | str | None = None) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._file = None if path is None else Path(path).open("a", encoding="utf-8")
        self.events: list[Event] = []

    def invoke(self, process: str, op: Op) -> int:
        """Records the start of `op`; returns its op id for the completion."""
        with self._lock:
            op_id = next(self._ids)
            self._write(Event(INVOKE, op_id, process, time.monotonic_ns(), op))
        return op_id

    def complete(self, kind: str, op_id: int, process: str, op: Op) -> Event:
        """Records the end of an operation: `kind` is ok, fail or info."""
        if kind not in (OK, FAIL, INFO):
            raise ValueError(f"not a completion: {kind!r}")
        with self._lock:
            event = Event(kind, op_id, process, time.monotonic_ns(), op)
            self._write(event)
        return event

    def fault(self, kind: str, detail: str = "") -> None:
        """Records a nemesis action as an instant operation."""
        op = Fault(kind, detail)
        op_id = self.invoke("nemesis", op)
        self.complete(INFO, op_id, "nemesis", op)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def _write(self, event: Event) -> None:
        self.events.append(event)
        if self._file is not None:
            self._file.write(event.to_json() + "\n")
            self._file.flush()


def load(path: Path | str) -> list[Event]:
    """Reads a JSONL history; blank lines are skipped."""
    with Path(path).open(encoding="utf-8") as lines:
        return [Event.from_json(line) for line in lines if line.strip()]


def dump(events: Iterable[Event], path: Path | str) -> None:
    """Writes `events` as a JSONL history (fixtures, doctored histories)."""
    with Path(path).open("w", encoding="utf-8") as out:
        for event in events:
            out.write(event.to_json() + "\n")


def operations(events: Iterable[Event]) -> Iterator[tuple[Event, Event | None]]:
    """Pairs each invoke with its completion (None while still open), in invoke order."""
    invokes: dict[int, Event] = {}
    completions: dict[int, Event] = {}
    for event in events:
        if event.type == INVOKE:
            invokes[event.op_id] = event
        else:
            completions[event.op_id] = event
    for op_id, invoke in invokes.items():
        yield invoke, completions.get(op_id)


def with_op(event: Event, **changes: object) -> Event:
    """A copy of `event` whose op has `changes` (doctoring histories in tests)."""
    return replace(event, op=replace(event.op, **changes))


__all__ = [
    "Assign",
    "Commit",
    "Event",
    "FAIL",
    "Fault",
    "GATEWAY_KILL",
    "GATEWAY_RESTART",
    "INFO",
    "INVOKE",
    "MODE_ASSIGN",
    "MODE_SUBSCRIBE",
    "OK",
    "Poll",
    "Recorder",
    "Send",
    "dump",
    "load",
    "operations",
    "with_op",
]
