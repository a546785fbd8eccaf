"""Kafka's consumer invariants under member crashes, checked on a real gateway and on the
`_meta/consumer_offsets` Delta table itself.

Members are at-least-once loops on the native group API (join, fetch from the committed
offset, process, commit, heartbeat). Scenarios: a member killed between processing and commit,
a rolling bounce (each member leaves and joins again), a static bounce (a member restarts with
its group.instance.id). Afterwards:

- a committed offset never goes backwards within the group (in commit order);
- a committed offset never exceeds what was processed + 1;
- every record below the final committed offset was processed at least once;
- each partition has exactly one owner per generation.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import httpx
from deltalake import DeltaTable

from tests.integration.helpers import b64, create_topic, produce

PARTITIONS = 3
SESSION_MS = 1500


@dataclass
class Ledger:
    """What every member did, shared by the member threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    processed: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))
    owners: dict[tuple[int, int], set[str]] = field(default_factory=lambda: defaultdict(set))

    def owned(self, generation: int, member_id: str, partitions: list[int]) -> None:
        with self.lock:
            for partition in partitions:
                self.owners[(generation, partition)].add(member_id)


class Member:
    """An at-least-once consumer loop; `crash_before_commit` makes it die mid-loop."""

    def __init__(self, url, group, topic, ledger, *, instance_id=None, crash_after_s=None):
        self.http = httpx.Client(base_url=url, timeout=30)
        self.group, self.topic, self.ledger = group, topic, ledger
        self.instance_id, self.crash_after_s = instance_id, crash_after_s
        self.member_id: str | None = None
        self.generation = -1
        self.partitions: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Member:
        self.thread.start()
        return self

    def leave(self) -> None:
        self.stop.set()
        self.thread.join(30)
        if self.member_id:
            self.http.delete(f"/groups/{self.group}/members/{self.member_id}")

    def kill(self) -> None:
        """Stop without leaving: the coordinator notices when the session times out."""
        self.stop.set()
        self.thread.join(30)

    def _join(self) -> None:
        body = {
            "topics": [self.topic],
            "session_timeout_ms": SESSION_MS,
            "rebalance_timeout_ms": 5000,
            "group_instance_id": self.instance_id,
            "member_id": self.member_id,
        }
        while not self.stop.is_set():
            response = self.http.post(f"/groups/{self.group}/members", json=body)
            if response.status_code == 200:
                joined = response.json()
                self.member_id, self.generation = joined["member_id"], joined["generation_id"]
                self.partitions = [p["partition"] for p in joined["assignment"]]
                # A static member's identity is its instance id: a restart replaces (and
                # fences) the old member id within the same generation.
                owner = self.instance_id or self.member_id
                self.ledger.owned(self.generation, owner, self.partitions)
                return
            body["member_id"] = None  # unknown or fenced: join as new
            time.sleep(0.05)

    def _run(self) -> None:
        started = time.monotonic()
        while not self.stop.is_set():
            try:
                self._loop(started)
                return
            except httpx.TransportError:
                time.sleep(0.1)  # a dropped connection: retry, as a consumer client does

    def _loop(self, started: float) -> None:
        if self.member_id is None:
            self._join()
        while not self.stop.is_set():
            if not self._heartbeat():
                self._join()
                continue
            positions = self._committed()
            processed = self._process(positions)
            crashing = self.crash_after_s is not None and (
                time.monotonic() - started > self.crash_after_s
            )
            if crashing and processed:
                return  # killed between processing and commit: no leave, no commit
            if processed and not self._commit(processed):
                self._join()
            time.sleep(0.02)

    def _heartbeat(self) -> bool:
        response = self.http.post(
            f"/groups/{self.group}/members/{self.member_id}/heartbeat",
            json={"generation_id": self.generation},
        )
        return response.status_code == 204

    def _committed(self) -> dict[int, int]:
        stored = self.http.get(f"/groups/{self.group}/offsets").json()["offsets"]
        return {o["partition"]: o["offset"] for o in stored if o["topic"] == self.topic}

    def _process(self, positions: dict[int, int]) -> dict[int, int]:
        """Fetch a few records per owned partition and 'process' them; new positions."""
        done = {}
        for partition in self.partitions:
            offset = positions.get(partition, 0)
            response = self.http.get(
                f"/topics/{self.topic}/partitions/{partition}/records",
                params={"offset": offset, "max_bytes": 60},
            )
            records = response.json() if response.status_code == 200 else []
            if records:
                with self.ledger.lock:
                    self.ledger.processed[partition].update(r["offset"] for r in records)
                done[partition] = records[-1]["offset"] + 1
        return done

    def _commit(self, positions: dict[int, int]) -> bool:
        body = {
            "member_id": self.member_id,
            "generation_id": self.generation,
            "offsets": [
                {"topic": self.topic, "partition": p, "offset": o} for p, o in positions.items()
            ],
        }
        return self.http.post(f"/groups/{self.group}/offsets", json=body).status_code == 204


def wait_until_caught_up(client, group, topic, end_offsets, timeout_s=20) -> None:
    deadline = time.monotonic() + timeout_s
    committed: dict[int, int] = {}
    while time.monotonic() < deadline:
        try:
            stored = client.get(f"/groups/{group}/offsets").json()["offsets"]
        except httpx.TransportError:
            continue
        committed = {o["partition"]: o["offset"] for o in stored if o["topic"] == topic}
        if all(committed.get(p) == end for p, end in end_offsets.items()):
            return
        time.sleep(0.2)
    described = client.get(f"/groups/{group}").json()
    raise AssertionError(
        f"group {group} did not catch up: {committed} != {end_offsets}; group: {described}"
    )


def test_consumer_invariants_under_crashes_and_bounces(gateway, client, topic_name):
    create_topic(client, topic_name, partitions=PARTITIONS)
    for partition in range(PARTITIONS):
        body = [{"value": b64(f"p{partition}-{i:03d}")} for i in range(120)]
        assert produce(client, topic_name, body, partition=partition).status_code == 200
    group, ledger, url = f"g-{topic_name}", Ledger(), gateway.url

    members = [Member(url, group, topic_name, ledger).start() for _ in range(2)]
    static = Member(url, group, topic_name, ledger, instance_id="static-1").start()
    crasher = Member(url, group, topic_name, ledger, crash_after_s=1.0).start()
    time.sleep(2.5)
    crasher.kill()  # killed between processing and commit
    for index, member in enumerate(members):  # rolling bounce
        member.leave()
        members[index] = Member(url, group, topic_name, ledger).start()
        time.sleep(0.7)
    static.kill()  # static bounce: back within the session timeout, same instance id
    static = Member(url, group, topic_name, ledger, instance_id="static-1").start()
    wait_until_caught_up(client, group, topic_name, dict.fromkeys(range(PARTITIONS), 120))
    for member in [*members, static]:
        member.leave()

    rows = DeltaTable(str(gateway.data_dir / "_meta" / "consumer_offsets")).to_pyarrow_table()
    commits = sorted(
        (r for r in rows.to_pylist() if r["group_id"] == group),
        key=lambda r: r["commit_sequence"],
    )
    last: dict[int, int] = {}
    for row in commits:
        partition, offset = row["partition"], row["offset"]
        assert offset >= last.get(partition, 0), f"offset went backwards: {row}"
        assert offset <= max(ledger.processed[partition]) + 1, f"beyond processed: {row}"
        last[partition] = offset
    for partition in range(PARTITIONS):
        assert set(range(last[partition])) <= ledger.processed[partition]
    doubles = {key: owners for key, owners in ledger.owners.items() if len(owners) > 1}
    assert not doubles, f"partitions with two owners in one generation: {doubles}"
    assert any(key[0] > 3 for key in ledger.owners)  # the scenario did rebalance many times
