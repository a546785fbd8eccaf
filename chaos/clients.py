"""Recorded HTTP clients: every request they make is an operation in a `Recorder`'s history.

- `IdempotentProducer`: one record per request to a partition URL with (producer id, epoch,
  sequence); an indeterminate outcome is recorded `info` and the same (pid, epoch, seq) is
  sent again until the gateway answers definitively.
- `AssignPoller`: stateless fetches from positions it keeps itself (Kafka's assign mode).
- `GroupMember`: a native group API member: join, fetch from the committed offset, process,
  commit; the nemesis can make it die at a chosen point, e.g. between process and commit.
- `KafkaIdempotentProducer`: librdkafka's idempotent producer over the Kafka protocol (TK).

Clients are single-threaded each (one per thread) and follow the gateway across restarts
through a shared `Endpoint`.
"""

from __future__ import annotations

import base64
import random
import threading
import time
from dataclasses import replace

import httpx

from chaos.history import (
    FAIL,
    INFO,
    MODE_ASSIGN,
    MODE_SUBSCRIBE,
    OK,
    Assign,
    Commit,
    Poll,
    Recorder,
    Send,
)

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
REQUEST_TIMEOUT_S = 5.0
BACKOFF_S_MIN, BACKOFF_S_MAX = 0.02, 0.5
# Idempotent-producer rejections: nothing was appended by this attempt.
DEFINITIVE_PRODUCER_ERRORS = {40904, 40906, 40907}
# DUPLICATE_SEQUENCE says nothing about whether an earlier attempt landed: indeterminate.
INDETERMINATE_CODES = {40905}


class Endpoint:
    """The gateway's current base URL, changed by the nemesis on restart (thread-safe)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        with self._lock:
            return self._url

    def set(self, url: str) -> None:
        with self._lock:
            self._url = url


def b64(text: str | None) -> str | None:
    return None if text is None else base64.b64encode(text.encode()).decode()


def unb64(text: str | None) -> str | None:
    return None if text is None else base64.b64decode(text).decode()


def _error_code(response: httpx.Response) -> int | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("error_code") if isinstance(body, dict) else None


class _Backoff:
    def __init__(self) -> None:
        self.delay_s = BACKOFF_S_MIN

    def sleep(self) -> None:
        time.sleep(self.delay_s)
        self.delay_s = min(self.delay_s * 2, BACKOFF_S_MAX)


class IdempotentProducer:
    """Sends records one by one with Kafka's idempotent-producer fields.

    Per partition the sequence advances only on a definitive answer, so a retry after a crash
    carries the same (pid, epoch, seq) and the gateway must answer with the original offset.
    """

    def __init__(
        self,
        name: str,
        endpoint: Endpoint,
        recorder: Recorder,
        topic: str,
        *,
        idempotent=True,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.name, self.endpoint, self.recorder, self.topic = name, endpoint, recorder, topic
        self.idempotent = idempotent  # False: a plain producer (control runs that must fail)
        # T2 raises it past its longest pause: a request to a paused leader stays in flight and
        # is answered by the stale leader after SIGCONT, not abandoned by the client.
        self.http = httpx.Client(timeout=timeout_s)
        self.producer_id: int | None = None
        self.epoch = 0
        self.sequences: dict[int, int] = {}
        self.errors: dict[str, int] = {}

    def init(self, deadline: float) -> None:
        """Gets a new producer id (retrying while the gateway is down)."""
        backoff = _Backoff()
        while time.monotonic() < deadline:
            try:
                answer = self.http.post(f"{self.endpoint.url}/v3/clusters/lakelog/producers")
                if answer.status_code == 200:
                    body = answer.json()
                    self.producer_id, self.epoch = body["producer_id"], body["producer_epoch"]
                    self.sequences = {}
                    return
            except httpx.HTTPError:
                pass
            backoff.sleep()
        raise TimeoutError(f"{self.name}: no producer id before the deadline")

    def send(self, partition: int, value: str, *, key: str | None = None, deadline: float) -> int:
        """Sends until acked (returns the offset) or rejected (returns -1).

        Past `deadline` an unresolved send gives up (-1) and the producer takes a new id, since
        its sequence on that partition is then unknown.
        """
        if self.producer_id is None and self.idempotent:
            self.init(deadline)
        sequence = self.sequences.get(partition, 0)
        op = Send(self.topic, partition, value, key, self.producer_id, self.epoch, sequence)
        if not self.idempotent:
            op = Send(self.topic, partition, value, key)
        backoff = _Backoff()
        while time.monotonic() < deadline:
            kind, offset, error = self.attempt(op)
            if kind == OK:
                self.sequences[partition] = sequence + 1
                return offset
            if kind == FAIL:
                self.producer_id = None  # rejected: start over with a new id and sequence 0
                return -1
            backoff.sleep()
        self.producer_id = None
        return -1

    def attempt(self, op: Send) -> tuple[str, int, str | None]:
        op_id = self.recorder.invoke(self.name, op)
        kind, offset, error = self._request(op)
        self.errors[error or "none"] = self.errors.get(error or "none", 0) + 1
        done = replace(op, offset=offset) if kind == OK else replace(op, error=error)
        self.recorder.complete(kind, op_id, self.name, done)
        return kind, offset, error

    def _request(self, op: Send) -> tuple[str, int | None, str | None]:
        body: dict = {"records": [{"key": b64(op.key), "value": b64(op.value)}]}
        if op.producer_id is not None:
            body |= {
                "producer_id": op.producer_id,
                "producer_epoch": op.producer_epoch,
                "base_sequence": op.sequence,
            }
        url = f"{self.endpoint.url}/topics/{op.topic}/partitions/{op.partition}"
        try:
            answer = self.http.post(url, json=body, headers={"Content-Type": BINARY_V2})
        except httpx.HTTPError as error:
            return INFO, None, type(error).__name__
        entry = {}
        if answer.status_code < 500:
            try:
                entry = (answer.json().get("offsets") or [{}])[0]
            except (ValueError, AttributeError):
                entry = {}
        if answer.status_code == 200 and entry.get("offset") is not None:
            return OK, entry["offset"], None
        code = entry.get("error_code") or _error_code(answer)
        if answer.status_code >= 500 or code in INDETERMINATE_CODES or (code or 0) >= 50000:
            return INFO, None, f"{answer.status_code}:{code}"
        return FAIL, None, f"{answer.status_code}:{code}"


class AssignPoller:
    """Reads partitions with the stateless fetch from positions it keeps (assign mode)."""

    def __init__(self, name: str, endpoint: Endpoint, recorder: Recorder, topic: str) -> None:
        self.name, self.endpoint, self.recorder, self.topic = name, endpoint, recorder, topic
        self.http = httpx.Client(timeout=REQUEST_TIMEOUT_S + 2)
        self.positions: dict[int, int] = {}
        self.out_of_range = 0

    def seek(self, partition: int, offset: int) -> None:
        self.positions[partition] = offset
        op = Assign(self.name, MODE_ASSIGN, partitions=((self.topic, partition, offset),))
        self.recorder.complete(OK, self.recorder.invoke(self.name, op), self.name, op)

    def bounds(self, partition: int) -> tuple[int, int]:
        """(log start offset, high watermark); raises httpx.HTTPError while unreachable."""
        url = f"{self.endpoint.url}/topics/{self.topic}/partitions/{partition}/offsets"
        body = self.http.get(url).raise_for_status().json()
        return body["beginning_offset"], body["end_offset"]

    def poll(self, partition: int, *, timeout_ms: int = 200, final: bool = False) -> str:
        """One fetch from the partition's position: returns ok, info or the error code."""
        position = self.positions.setdefault(partition, 0)
        op = Poll(self.name, MODE_ASSIGN, positions=((self.topic, partition, position),))
        op = replace(op, final=final)
        op_id = self.recorder.invoke(self.name, op)
        url = f"{self.endpoint.url}/topics/{self.topic}/partitions/{partition}/records"
        params = {"offset": position, "timeout": timeout_ms, "max_bytes": 1_000_000}
        try:
            answer = self.http.get(url, params=params, headers={"Accept": BINARY_V2})
        except httpx.HTTPError as error:
            self.recorder.complete(INFO, op_id, self.name, replace(op, error=type(error).__name__))
            return INFO
        if answer.status_code != 200:
            code = str(_error_code(answer) or answer.status_code)
            self.out_of_range += code == "41601"
            kind = FAIL if answer.status_code < 500 else INFO
            self.recorder.complete(kind, op_id, self.name, replace(op, error=code))
            return code
        records = tuple(
            (self.topic, partition, r["offset"], unb64(r["value"])) for r in answer.json()
        )
        self.recorder.complete(OK, op_id, self.name, replace(op, records=records))
        if records:
            self.positions[partition] = records[-1][2] + 1
        return OK

    def drain(self, partitions: range, *, deadline: float) -> None:
        """The final full read: every partition from its log start to its high watermark."""
        for partition in partitions:
            start, end = _retry(lambda p=partition: self.bounds(p), deadline)
            self.seek(partition, start)
            empty = 0
            while self.positions[partition] < end and time.monotonic() < deadline:
                before = self.positions[partition]
                self.poll(partition, timeout_ms=500, final=True)
                empty = empty + 1 if self.positions[partition] == before else 0
                if empty > 20:
                    break  # nothing more to read below the high watermark (compacted tail)


def _retry(call, deadline: float):
    backoff = _Backoff()
    while True:
        try:
            return call()
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            backoff.sleep()


class GroupMember:
    """An at-least-once member of a group on the native API, in its own thread.

    Loop: heartbeat, read the committed offsets, fetch a few records per owned partition
    ("process" = the recorded poll), commit the new positions one partition per request. `kill`
    makes it stop at its next `kill_point` without leaving: "after_process" is between
    processing and commit, "anywhere" the next step of any kind. Without `start`, `join` and
    `commit` are single recorded steps (a test's scripted member).
    """

    def __init__(self, name, endpoint, recorder, group, topic, *, instance_id=None, seed=0):
        self.name, self.endpoint, self.recorder = name, endpoint, recorder
        self.group, self.topic, self.instance_id = group, topic, instance_id
        self.http = httpx.Client(timeout=REQUEST_TIMEOUT_S)
        self.random = random.Random(seed)
        self.member_id: str | None = None
        self.generation = -1
        self.partitions: list[int] = []
        self.kill_point: str | None = None
        self.pause_s = 0.0  # a zombie: stalls this long between process and commit, once
        self._released: threading.Event | None = None  # a zombie held until this is set
        self._stalled = threading.Event()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> GroupMember:
        self.thread.start()
        return self

    def kill(self, point: str) -> None:
        """Dies at `point` (after_process | anywhere); returns once it is dead."""
        self.kill_point = point
        self.thread.join(30)

    def pause(self, seconds: float) -> None:
        """Stalls once for `seconds` between processing and commit (a zombie member)."""
        self.pause_s = seconds

    def hold(self) -> threading.Event:
        """Stalls once between processing a batch and committing it, until `release`: a zombie
        across a gateway restart. Returns an event set once it is stalled there."""
        self._stalled = threading.Event()
        self._released = threading.Event()
        return self._stalled

    def release(self) -> None:
        """Ends a `hold`; a member not stalled yet then does not stall at all."""
        if self._released is not None:
            self._released.set()

    def leave(self) -> None:
        self.stopped.set()
        if self.thread.ident is not None:  # started (a scripted member has no thread)
            self.thread.join(30)
        if self.member_id is not None:
            try:
                self.http.delete(
                    f"{self.endpoint.url}/groups/{self.group}/members/{self.member_id}"
                )
            except httpx.HTTPError:
                pass

    def _dies(self, point: str) -> bool:
        if self.kill_point == "anywhere" and self.random.random() < 0.5:
            return True
        return self.kill_point == point

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                if self._loop():
                    return
            except httpx.HTTPError:
                time.sleep(0.1)

    def _loop(self) -> bool:
        """Runs until killed (True) or stopped (False)."""
        while not self.stopped.is_set():
            if self.member_id is None or not self._heartbeat():
                self.join()
                continue
            if self._dies("before_fetch"):
                return True
            processed = self._process(self._committed())
            if self._dies("after_process"):
                return True  # processed, never committed
            if processed:
                self._stall()  # only with a batch in hand: a zombie with nothing to commit
            for partition, offset in processed.items():
                if not self.commit(partition, offset):
                    break
                if self._dies("mid_commit"):
                    return True
            time.sleep(0.01)
        return False

    def _stall(self) -> None:
        if self.pause_s:
            time.sleep(self.pause_s)  # past the session timeout: the commit must be refused
            self.pause_s = 0.0
        released = self._released
        if released is not None:
            self._stalled.set()
            released.wait()  # the gateway is restarted meanwhile: the commit must be refused
            self._released = None

    def join(self) -> None:
        """Joins (again, with its member id if it has one) and takes the assignment."""
        body = {
            "topics": [self.topic],
            "session_timeout_ms": 1500,
            "rebalance_timeout_ms": 5000,
            "group_instance_id": self.instance_id,
            "member_id": self.member_id,
        }
        op = Assign(self.name, MODE_SUBSCRIBE, self.group)
        op_id = self.recorder.invoke(self.name, op)
        try:
            answer = self.http.post(
                f"{self.endpoint.url}/groups/{self.group}/members", json=body, timeout=15
            )
        except httpx.HTTPError as error:
            self.recorder.complete(INFO, op_id, self.name, replace(op, error=type(error).__name__))
            raise
        if answer.status_code != 200:
            self.member_id = None
            error = str(_error_code(answer) or answer.status_code)
            self.recorder.complete(FAIL, op_id, self.name, replace(op, error=error))
            time.sleep(0.05)
            return
        joined = answer.json()
        self.member_id, self.generation = joined["member_id"], joined["generation_id"]
        self.partitions = [p["partition"] for p in joined["assignment"]]
        assigned = tuple((self.topic, p, None) for p in self.partitions)
        done = replace(op, generation=self.generation, partitions=assigned)
        self.recorder.complete(OK, op_id, self.name, done)

    def _heartbeat(self) -> bool:
        answer = self.http.post(
            f"{self.endpoint.url}/groups/{self.group}/members/{self.member_id}/heartbeat",
            json={"generation_id": self.generation},
        )
        if answer.status_code in (404, 409) and _error_code(answer) in (40911, 40913):
            self.member_id = None  # unknown or fenced: join as a new member
        return answer.status_code == 204

    def _committed(self) -> dict[int, int]:
        answer = self.http.get(f"{self.endpoint.url}/groups/{self.group}/offsets")
        stored = answer.raise_for_status().json()  # an error answer (restarting): retry
        return {o["partition"]: o["offset"] for o in stored["offsets"] if o["topic"] == self.topic}

    def _process(self, committed: dict[int, int]) -> dict[int, int]:
        done = {}
        for partition in self.partitions:
            position = committed.get(partition, 0)
            op = Poll(self.name, MODE_SUBSCRIBE, self.group, ((self.topic, partition, position),))
            op_id = self.recorder.invoke(self.name, op)
            url = f"{self.endpoint.url}/topics/{self.topic}/partitions/{partition}/records"
            params = {"offset": position, "max_bytes": 2000, "timeout": 100}
            try:
                answer = self.http.get(url, params=params, headers={"Accept": BINARY_V2})
            except httpx.HTTPError as error:
                self.recorder.complete(
                    INFO, op_id, self.name, replace(op, error=type(error).__name__)
                )
                raise
            if answer.status_code != 200:
                error = str(_error_code(answer) or answer.status_code)
                self.recorder.complete(FAIL, op_id, self.name, replace(op, error=error))
                continue
            records = tuple(
                (self.topic, partition, r["offset"], unb64(r["value"])) for r in answer.json()
            )
            self.recorder.complete(OK, op_id, self.name, replace(op, records=records))
            if records:
                done[partition] = records[-1][2] + 1
        return done

    def commit(self, partition: int, offset: int) -> bool:
        """Commits `offset` for `partition` in its generation; False when refused."""
        op = Commit(self.group, self.topic, partition, offset, self.generation, self.member_id)
        op_id = self.recorder.invoke(self.name, op)
        body = {
            "member_id": self.member_id,
            "generation_id": self.generation,
            "offsets": [{"topic": self.topic, "partition": partition, "offset": offset}],
        }
        try:
            answer = self.http.post(f"{self.endpoint.url}/groups/{self.group}/offsets", json=body)
        except httpx.HTTPError as error:
            self.recorder.complete(INFO, op_id, self.name, replace(op, error=type(error).__name__))
            raise
        if answer.status_code == 204:
            self.recorder.complete(OK, op_id, self.name, op)
            return True
        error = str(_error_code(answer) or answer.status_code)
        kind = INFO if answer.status_code >= 500 else FAIL
        self.recorder.complete(kind, op_id, self.name, replace(op, error=error))
        return False


class KafkaIdempotentProducer:
    """librdkafka's idempotent producer (confluent-kafka) through the gateway's Kafka listener:
    one record at a time, each a recorded send. librdkafka keeps the producer id, epoch and
    sequences itself and retries across gateway restarts; a record it reports delivered is
    `ok` at its offset, one it gives up on (or the deadline passes) is `info`, since it may
    have been written."""

    def __init__(self, name: str, bootstrap: str, recorder: Recorder, topic: str) -> None:
        from confluent_kafka import Producer  # only the Kafka scenario needs librdkafka

        self.name, self.recorder, self.topic = name, recorder, topic
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 0,
                "message.timeout.ms": 60_000,
                "reconnect.backoff.max.ms": 500,
            }
        )
        self.errors: dict[str, int] = {}

    def send(self, partition: int, value: str, *, key: str | None = None, deadline: float) -> int:
        op = Send(self.topic, partition, value, key)
        op_id = self.recorder.invoke(self.name, op)
        reports: list = []
        self.producer.produce(
            self.topic,
            value=value.encode(),
            key=None if key is None else key.encode(),
            partition=partition,
            on_delivery=lambda error, message: reports.append((error, message)),
        )
        while not reports and time.monotonic() < deadline:
            self.producer.poll(0.05)
        if not reports:
            return self._unknown(op_id, op, "deadline")
        error, message = reports[0]
        if error is not None:
            return self._unknown(op_id, op, error.name())
        self.errors["none"] = self.errors.get("none", 0) + 1
        self.recorder.complete(OK, op_id, self.name, replace(op, offset=message.offset()))
        return message.offset()

    def _unknown(self, op_id: int, op: Send, error: str) -> int:
        self.errors[error] = self.errors.get(error, 0) + 1
        self.recorder.complete(INFO, op_id, self.name, replace(op, error=error))
        return -1
