"""Consumer groups: v2 consume throughput, rebalance time, offset commit latency, in one run.

One gateway process (`lakelog serve`, default settings) on a fresh temp data dir; every client
is an asyncio task of this process speaking raw HTTP/1.1 (bench/raw_http.py), one keep-alive
connection per consumer, member or committer.

Cases:

  (1) consume   a 4-partition topic prefilled with N records (default 400 000) of 100-byte
                random values, produced with 1000-record requests to
                POST /topics/{t}/partitions/{p} before any clock starts. Then, per round:
                  stateless, 1 reader   GET /topics/{t}/partitions/{p}/records?offset=&max_bytes=
                                        8 MiB, the 4 partitions one after another;
                  v2, 1 instance        one Confluent v2 consumer instance subscribed to the
                                        topic (format binary, auto.offset.reset earliest,
                                        auto-commit on as Kafka's default: one offset commit
                                        per instance falls in the timed window), polling
                                        GET /consumers/{g}/instances/{i}/records?max_bytes=
                                        8 MiB&timeout=1000 (Accept binary v2);
                  stateless, 4 readers  one reader per partition, concurrently;
                  v2, 4 instances       4 instances in one fresh group (one partition each,
                                        checked before the clock starts).
                The clock runs from the first request to the moment every record is consumed.
                Verified: every offset of every partition seen exactly once. records/s, MB/s
                (values only, MB = 10^6 bytes), and v2 / stateless with the same number of
                consumers (the v2 instance overhead). Several rounds (default 3); the median
                round is shown and every round listed.
  (2) rebalance native API (/groups/{g}/members), a 12-partition topic, members with
                session.timeout.ms 3000 that join, sync, heartbeat every 100 ms and rejoin
                on 409 (40912 REBALANCE_IN_PROGRESS, 40910 ILLEGAL_GENERATION; 40911: as a new
                member). A fresh group of 3 stable members per run, then:
                  (a) join   a 4th member joins: time from its join request;
                  (b) leave  a member stops its loop and sends DELETE: time from the DELETE;
                  (c) crash  a member stops heartbeating: time from its last heartbeat's
                             response, reported with and without the 3 000 ms session timeout;
                each until every remaining member holds its new assignment: all have synced
                the same new generation, the assignments tile the 12 partitions, and
                GET /groups/{g} says Stable at that generation (the time is the last sync's
                response; the join response already carries the assignment, so the sync is one
                more round trip). Members learn of a rebalance only from a heartbeat's 409, so
                the times depend on where the event falls in their 100 ms heartbeat cycle (the
                members of a run start together, so their cycles are nearly in phase).
                Repeated 5 times (--quick 2): median and max.
  (3) commits   POST /groups/{g}/offsets (member id + generation, one partition's offset per
                commit) on an 8-partition topic, for a fixed time (default 6 s, --quick 3 s):
                1 committer sequentially (p50/p99), 8 concurrent committers that are the 8
                members of one group, and 8 committers each alone in its own group. Members
                heartbeat every second meanwhile (Kafka's loop does). commits/s, p50/p99, and
                Delta commits of _meta/consumer_offsets (from its _delta_log) per offset commit.

CPU of the gateway process, this process and everything else is measured per case (/proc).

Usage: .venv/bin/python bench/consumers.py [--quick] [--records N] [--rounds R]
           [--repeats R] [--commit-seconds S] [--tmp-dir DIR]
(BENCH_KEEP_TMP=1 keeps the temp dir and the gateway's log.)
Progress goes to stderr, markdown tables to stdout. About 75 s (--quick about 30 s).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.latency_failover import Cleanup, create_topic, percentile  # noqa: E402
from bench.produce_fetch import CpuMeter, machine_info  # noqa: E402
from bench.raw_http import RawConnection, RawResponse  # noqa: E402
from conf.settings import load_settings  # noqa: E402
from tests.gateway_process import GatewayProcess  # noqa: E402

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
V2_JSON = "application/vnd.kafka.v2+json"
JSON = "application/json"
VALUE_BYTES = 100
CONSUME_PARTITIONS = 4
PREFILL_BATCH = 1000
PREFILL_CONNECTIONS = 8
PREFILL_DISTINCT_BODIES = 8  # per partition, cycled
FETCH_BYTES_MAX = 8 * 1024 * 1024
V2_POLL_TIMEOUT_MS = 1000
CONSUME_GIVE_UP_S = 300.0
REBALANCE_PARTITIONS = 12
REBALANCE_MEMBERS = 3
SESSION_TIMEOUT_MS = 3000
REBALANCE_TIMEOUT_MS = 10_000
HEARTBEAT_S = 0.100
SETTLE_S = 0.3  # stable group heartbeating before an event
REBALANCE_GIVE_UP_S = 30.0
REQUEST_GIVE_UP_S = 30.0
COMMIT_PARTITIONS = 8
COMMITTERS = 8
COMMIT_HEARTBEAT_S = 1.0
COMMIT_SESSION_TIMEOUT_MS = 30_000
ERRORS_KEPT = 5
NOISY_OTHER_CPU = 0.25  # flag cases where other processes used more than this share of a core


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class BenchFailure(RuntimeError):
    """A gateway answer the bench did not expect (kept for the report)."""


async def call(
    connection: RawConnection, method: str, target: str, body: object = None, accept: str = JSON
) -> RawResponse:
    """One request with a JSON body (or none), bounded by REQUEST_GIVE_UP_S."""
    headers = {"Accept": accept}
    payload = b""
    if body is not None:
        payload = body if isinstance(body, bytes) else orjson.dumps(body)
        headers["Content-Type"] = V2_JSON if target.startswith("/consumers") else JSON
    request = connection.request(method, target, payload, headers)
    return await asyncio.wait_for(request, REQUEST_GIVE_UP_S)


def expect(response: RawResponse, status: int, what: str) -> RawResponse:
    if response.status != status:
        raise BenchFailure(f"{what}: HTTP {response.status} {response.body[:300]!r}")
    return response


def error_code(response: RawResponse) -> int | None:
    try:
        return orjson.loads(response.body).get("error_code")
    except (orjson.JSONDecodeError, AttributeError):
        return None


async def with_connection(url: str, work: Callable[[RawConnection], Awaitable]):
    connection = await RawConnection.open(url)
    try:
        return await work(connection)
    finally:
        await connection.close()


# ---- (1) consume throughput ------------------------------------------------------------------


def prefill_bodies(partition: int) -> list[bytes]:
    bodies = []
    for _ in range(PREFILL_DISTINCT_BODIES):
        records = [
            {"value": base64.b64encode(os.urandom(VALUE_BYTES)).decode()}
            for _ in range(PREFILL_BATCH)
        ]
        bodies.append(orjson.dumps({"records": records}))
    return bodies


async def prefill(url: str, topic: str, records_total: int) -> dict[int, int]:
    """Produce `records_total` records spread evenly over the partitions; returns the high
    watermark of each partition (checked to equal what was acknowledged)."""
    per_partition = records_total // CONSUME_PARTITIONS
    requests = [
        (p, i) for i in range(per_partition // PREFILL_BATCH) for p in range(CONSUME_PARTITIONS)
    ]
    bodies = {p: prefill_bodies(p) for p in range(CONSUME_PARTITIONS)}
    acked = dict.fromkeys(range(CONSUME_PARTITIONS), 0)

    async def produce(connection: RawConnection) -> None:
        while requests:
            partition, index = requests.pop()
            body = bodies[partition][index % PREFILL_DISTINCT_BODIES]
            target = f"/topics/{topic}/partitions/{partition}"
            response = await connection.request("POST", target, body, {"Content-Type": BINARY_V2})
            offsets = orjson.loads(expect(response, 200, "prefill produce").body)["offsets"]
            if any(entry.get("error_code") for entry in offsets):
                raise BenchFailure(f"prefill produce: {offsets[0]}")
            acked[partition] += len(offsets)

    await asyncio.gather(*(with_connection(url, produce) for _ in range(PREFILL_CONNECTIONS)))
    watermarks = await with_connection(url, lambda c: _watermarks(c, topic))
    if watermarks != acked:
        raise BenchFailure(f"prefill: high watermarks {watermarks} != acknowledged {acked}")
    return watermarks


async def _watermarks(connection: RawConnection, topic: str) -> dict[int, int]:
    marks = {}
    for partition in range(CONSUME_PARTITIONS):
        target = f"/topics/{topic}/partitions/{partition}/offsets"
        response = expect(await call(connection, "GET", target), 200, "offsets")
        marks[partition] = orjson.loads(response.body)["end_offset"]
    return marks


@dataclass
class Seen:
    """Every offset of every partition, counted: exactly once each is the pass condition."""

    watermarks: dict[int, int]
    counts: dict[int, bytearray] = field(init=False)
    distinct: int = 0
    duplicates: int = 0
    bad_values: int = 0

    def __post_init__(self) -> None:
        self.counts = {p: bytearray(hw) for p, hw in self.watermarks.items()}

    def add(self, items: list[dict]) -> None:
        for item in items:
            counts = self.counts[item["partition"]]
            offset = item["offset"]
            if counts[offset]:
                self.duplicates += 1
                counts[offset] = min(255, counts[offset] + 1)
                continue
            counts[offset] = 1
            self.distinct += 1
        if items and len(base64.b64decode(items[-1]["value"])) != VALUE_BYTES:
            self.bad_values += 1

    def complete(self, partitions) -> bool:
        return all(self.counts[p].count(1) == self.watermarks[p] for p in partitions)

    @property
    def verified(self) -> bool:
        return not self.duplicates and not self.bad_values and self.complete(self.watermarks)


@dataclass
class ConsumeResult:
    case: str
    consumers: int
    records: int
    seconds: float
    requests: int
    empty_responses: int
    verified: bool
    duplicates: int
    cpu: dict
    round_index: int

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.records * VALUE_BYTES / self.seconds / 1e6


@dataclass
class Tally:
    requests: int = 0
    empty: int = 0


async def stateless_reader(
    url: str, topic: str, partitions: list[int], seen: Seen, tally: Tally
) -> None:
    async def read(connection: RawConnection) -> None:
        for partition in partitions:
            offset, end = 0, seen.watermarks[partition]
            while offset < end:
                target = (
                    f"/topics/{topic}/partitions/{partition}/records?offset={offset}"
                    f"&max_bytes={FETCH_BYTES_MAX}"
                )
                response = await call(connection, "GET", target, accept=BINARY_V2)
                items = orjson.loads(expect(response, 200, "stateless fetch").body)
                tally.requests += 1
                if not items:
                    tally.empty += 1
                    continue
                seen.add(items)
                offset = items[-1]["offset"] + 1

    await with_connection(url, read)


async def v2_instance(url: str, path: str, partitions: list[int], seen: Seen, tally: Tally):
    async def poll(connection: RawConnection) -> None:
        target = f"{path}/records?max_bytes={FETCH_BYTES_MAX}&timeout={V2_POLL_TIMEOUT_MS}"
        deadline = time.monotonic() + CONSUME_GIVE_UP_S
        while not seen.complete(partitions):
            if time.monotonic() > deadline:
                raise BenchFailure(f"{path}: not every record consumed in {CONSUME_GIVE_UP_S}s")
            response = await call(connection, "GET", target, accept=BINARY_V2)
            items = orjson.loads(expect(response, 200, "v2 records").body)
            tally.requests += 1
            if not items:
                tally.empty += 1
            seen.add(items)

    await with_connection(url, poll)


async def create_v2_instances(url: str, topic: str, group: str, count: int) -> list[tuple]:
    """Instances subscribed to `topic`; returns (path, assigned partitions) of each."""
    config = {"format": "binary", "auto.offset.reset": "earliest"}

    async def setup(connection: RawConnection) -> list[tuple]:
        paths = []
        for index in range(count):
            body = {**config, "name": f"c{index}"}
            response = await call(connection, "POST", f"/consumers/{group}", body, V2_JSON)
            instance = orjson.loads(expect(response, 200, "create instance").body)["instance_id"]
            path = f"/consumers/{group}/instances/{instance}"
            response = await call(connection, "POST", f"{path}/subscription", {"topics": [topic]})
            expect(response, 204, "subscribe")
            paths.append(path)
        assigned = []
        for path in paths:
            response = expect(await call(connection, "GET", f"{path}/assignments"), 200, "assign")
            assigned.append(
                (path, sorted(p["partition"] for p in orjson.loads(response.body)["partitions"]))
            )
        return assigned

    assigned = await with_connection(url, setup)
    every = sorted(p for _, partitions in assigned for p in partitions)
    if every != list(range(CONSUME_PARTITIONS)):
        raise BenchFailure(f"{group}: assignments {assigned} do not tile the partitions")
    return assigned


async def delete_v2_instances(url: str, paths: list[str]) -> None:
    async def delete(connection: RawConnection) -> None:
        for path in paths:
            expect(await call(connection, "DELETE", path), 204, "delete instance")

    await with_connection(url, delete)


async def run_consume_case(
    gateway: GatewayProcess,
    topic: str,
    watermarks: dict[int, int],
    case: str,
    consumers: int,
    round_index: int,
) -> ConsumeResult:
    seen, tallies = Seen(watermarks), [Tally() for _ in range(consumers)]
    partitions = sorted(watermarks)
    if case == "stateless":
        shares = [partitions[i::consumers] for i in range(consumers)]
        workers = [
            stateless_reader(gateway.url, topic, share, seen, tally)
            for share, tally in zip(shares, tallies, strict=True)
        ]
        paths = []
    else:
        group = f"consume-{consumers}-r{round_index}"
        assigned = await create_v2_instances(gateway.url, topic, group, consumers)
        workers = [
            v2_instance(gateway.url, path, share, seen, tally)
            for (path, share), tally in zip(assigned, tallies, strict=True)
        ]
        paths = [path for path, _ in assigned]
    meter, start = CpuMeter(gateway.process.pid), time.perf_counter()
    await asyncio.gather(*workers)
    seconds, cpu = time.perf_counter() - start, meter.stop()
    if paths:
        await delete_v2_instances(gateway.url, paths)
    return ConsumeResult(
        case,
        consumers,
        seen.distinct,
        seconds,
        sum(t.requests for t in tallies),
        sum(t.empty for t in tallies),
        seen.verified,
        seen.duplicates,
        cpu,
        round_index,
    )


async def bench_consume(gateway: GatewayProcess, records: int, rounds: int) -> tuple:
    topic = "consume"
    create_topic(gateway.url, topic, CONSUME_PARTITIONS)
    log(f"consume: prefilling {records:,} records ({PREFILL_BATCH}/request) ...")
    started = time.perf_counter()
    watermarks = await prefill(gateway.url, topic, records)
    prefill_s = time.perf_counter() - started
    log(f"  prefilled in {prefill_s:.1f}s: high watermarks {watermarks}")
    results = []
    for round_index in range(rounds):
        for consumers in (1, CONSUME_PARTITIONS):
            for case in ("stateless", "v2"):
                result = await run_consume_case(
                    gateway, topic, watermarks, case, consumers, round_index
                )
                results.append(result)
                log(
                    f"  round {round_index + 1}: {case} x{consumers}: "
                    f"{result.records_per_s:,.0f} records/s in {result.seconds:.2f}s, "
                    f"{result.requests} requests, verified {result.verified}"
                )
                if not result.verified:
                    raise BenchFailure(
                        f"{case} x{consumers}: {result.records} distinct records of "
                        f"{sum(watermarks.values())}, {result.duplicates} duplicates"
                    )
    return results, prefill_s


# ---- (2) rebalance time ----------------------------------------------------------------------


@dataclass
class Member:
    """A client loop of the native group API: join, sync, heartbeat, rejoin on 409."""

    name: str
    url: str
    group: str
    topic: str
    changed: Callable[[], None]
    heartbeat_s: float = HEARTBEAT_S
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    member_id: str | None = None
    generation: int = -1
    assignment: frozenset[int] = frozenset()
    synced_at: float = 0.0
    stop_requested: bool = False
    stopped_at: float | None = None  # the last heartbeat's response, when asked to stop
    rejoins: int = 0

    async def run(self) -> None:
        await with_connection(self.url, self._loop)

    async def _loop(self, connection: RawConnection) -> None:
        while True:
            await self._join_and_sync(connection)
            while True:
                await asyncio.sleep(self.heartbeat_s)
                target = f"/groups/{self.group}/members/{self.member_id}/heartbeat"
                body = {"generation_id": self.generation}
                response = await call(connection, "POST", target, body)
                if self.stop_requested:
                    self.stopped_at = time.monotonic()
                    return
                if response.status != 204:
                    self._on_error(response, "heartbeat")
                    break

    def _on_error(self, response: RawResponse, what: str) -> None:
        code = error_code(response)
        if response.status != 409 or code not in (40910, 40911, 40912):
            raise BenchFailure(f"{self.name} {what}: HTTP {response.status} {response.body!r}")
        if code == 40911:
            self.member_id = None
        self.rejoins += 1

    async def _join_and_sync(self, connection: RawConnection) -> None:
        while True:
            body = {
                "member_id": self.member_id,
                "client_id": self.name,
                "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
                "topics": [self.topic],
            }
            response = await call(connection, "POST", f"/groups/{self.group}/members", body)
            if response.status != 200:
                self._on_error(response, "join")
                continue
            joined = orjson.loads(response.body)
            self.member_id, generation = joined["member_id"], joined["generation_id"]
            target = f"/groups/{self.group}/members/{self.member_id}/sync"
            response = await call(connection, "POST", target, {"generation_id": generation})
            if response.status != 200:
                self._on_error(response, "sync")
                continue
            synced = orjson.loads(response.body)
            self.synced_at = time.monotonic()
            self.generation = generation
            self.assignment = frozenset(p["partition"] for p in synced["assignment"])
            self.changed()
            return


class Group:
    """Members of one group, and a wait for 'every member holds its new assignment'."""

    def __init__(self, url: str, group: str, topic: str, partitions: int, **member_options):
        self.url, self.group, self.topic, self.partitions = url, group, topic, partitions
        self.member_options = member_options
        self.members: list[Member] = []
        self.tasks: dict[str, asyncio.Task] = {}
        self._added = 0
        self._changed = asyncio.Event()

    def _notify(self) -> None:
        self._changed.set()

    def add(self) -> Member:
        self._added += 1
        member = Member(
            f"m{self._added}",
            self.url,
            self.group,
            self.topic,
            self._notify,
            **self.member_options,
        )
        self.members.append(member)
        self.tasks[member.name] = asyncio.create_task(member.run())
        return member

    async def stop(self, member: Member) -> None:
        """Ask the member's loop to end after its next heartbeat, and wait for that."""
        member.stop_requested = True
        await asyncio.wait_for(self.tasks.pop(member.name), REQUEST_GIVE_UP_S)
        self.members.remove(member)

    async def settled(self, after_generation: int) -> tuple[int, float]:
        """Wait until every member synced one generation newer than `after_generation`, the
        assignments tile the partitions and the coordinator says Stable at it. Returns the
        generation and when the last member's sync returned."""
        deadline = time.monotonic() + REBALANCE_GIVE_UP_S
        while time.monotonic() < deadline:
            self._raise_failed()
            generation = self._common_generation(after_generation)
            if generation is not None and await self._stable_at(generation):
                return generation, max(m.synced_at for m in self.members)
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), 0.05)
        raise BenchFailure(
            f"group {self.group} not settled after {REBALANCE_GIVE_UP_S}s: "
            f"{[(m.name, m.generation, sorted(m.assignment)) for m in self.members]}"
        )

    def _raise_failed(self) -> None:
        for task in self.tasks.values():
            if task.done() and task.exception() is not None:
                raise task.exception()

    def _common_generation(self, after_generation: int) -> int | None:
        generations = {m.generation for m in self.members}
        if len(generations) != 1:
            return None
        generation = generations.pop()
        if generation <= after_generation:
            return None
        owned = [p for m in self.members for p in m.assignment]
        return generation if sorted(owned) == list(range(self.partitions)) else None

    async def _stable_at(self, generation: int) -> bool:
        response = await with_connection(
            self.url, lambda c: call(c, "GET", f"/groups/{self.group}")
        )
        described = orjson.loads(expect(response, 200, "describe group").body)
        return (
            described["state"] == "Stable"
            and described["generation_id"] == generation
            and len(described["members"]) == len(self.members)
        )

    async def leave_all(self) -> None:
        """Teardown: end every loop at once, then DELETE every member that joined."""
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        self.tasks.clear()
        for member in [m for m in self.members if m.member_id]:
            await delete_member(self.url, self.group, member.member_id)
        self.members.clear()


async def delete_member(url: str, group: str, member_id: str) -> None:
    response = await with_connection(
        url, lambda c: call(c, "DELETE", f"/groups/{group}/members/{member_id}")
    )
    expect(response, 204, "leave")


@dataclass
class RebalanceRun:
    event: str
    seconds: float
    generation_before: int
    generation_after: int
    rejoins: int


async def rebalance_once(url: str, topic: str, event: str, run: int) -> RebalanceRun:
    group = Group(url, f"rebalance-{event}-{run}", topic, REBALANCE_PARTITIONS)
    try:
        for _ in range(REBALANCE_MEMBERS):
            group.add()
        before, _ = await group.settled(0)
        await asyncio.sleep(SETTLE_S)
        rejoins_before = sum(m.rejoins for m in group.members)
        if event == "join":
            started = time.monotonic()
            group.add()
        else:
            victim = group.members[0]
            await group.stop(victim)
            if event == "leave":
                started = time.monotonic()
                await delete_member(url, group.group, victim.member_id)
            else:
                started = victim.stopped_at
        after, done = await group.settled(before)
        rejoins = sum(m.rejoins for m in group.members) - rejoins_before
        return RebalanceRun(event, done - started, before, after, rejoins)
    finally:
        await group.leave_all()


async def bench_rebalance(url: str, repeats: int) -> list[RebalanceRun]:
    topic = "rebalance"
    create_topic(url, topic, REBALANCE_PARTITIONS)
    runs = []
    for event in ("join", "leave", "crash"):
        for run in range(repeats):
            result = await rebalance_once(url, topic, event, run)
            runs.append(result)
            log(
                f"  rebalance {event} run {run + 1}: {result.seconds * 1000:,.0f} ms "
                f"(generation {result.generation_before} -> {result.generation_after}, "
                f"{result.rejoins} rejoins)"
            )
    return runs


# ---- (3) offset commits ----------------------------------------------------------------------


@dataclass
class CommitResult:
    case: str
    committers: int
    groups: int
    seconds: float
    latencies_ms: list[float]
    errors: int
    error_samples: list[str]
    delta_commits: int
    cpu: dict

    @property
    def commits(self) -> int:
        return len(self.latencies_ms)

    @property
    def commits_per_s(self) -> float:
        return self.commits / self.seconds


def delta_version(data_dir: Path) -> int:
    """The newest version in _meta/consumer_offsets/_delta_log (-1: none yet)."""
    log_dir = data_dir / "_meta" / "consumer_offsets" / "_delta_log"
    versions = [int(p.name.split(".")[0]) for p in log_dir.glob("*.json") if p.name[0].isdigit()]
    return max(versions, default=-1)


async def committer(member: Member, deadline: float, result: CommitResult) -> None:
    partition = min(member.assignment)
    target = f"/groups/{member.group}/offsets"

    async def commit_until(connection: RawConnection) -> None:
        offset = 0
        while time.monotonic() < deadline:
            offset += 1
            body = {
                "member_id": member.member_id,
                "generation_id": member.generation,
                "offsets": [{"topic": member.topic, "partition": partition, "offset": offset}],
            }
            sent = time.perf_counter()
            response = await call(connection, "POST", target, body)
            if response.status == 204:
                result.latencies_ms.append((time.perf_counter() - sent) * 1000)
            else:
                result.errors += 1
                if len(result.error_samples) < ERRORS_KEPT:
                    result.error_samples.append(f"HTTP {response.status} {response.body!r}")

    await with_connection(member.url, commit_until)


async def run_commit_case(
    gateway: GatewayProcess, topic: str, case: str, committers: int, groups: int, seconds: float
) -> CommitResult:
    options = {"heartbeat_s": COMMIT_HEARTBEAT_S, "session_timeout_ms": COMMIT_SESSION_TIMEOUT_MS}
    members_per_group = committers // groups
    partitions = COMMIT_PARTITIONS
    the_groups = [
        Group(gateway.url, f"commit-{case.replace(' ', '-')}-{g}", topic, partitions, **options)
        for g in range(groups)
    ]
    try:
        for group in the_groups:
            for _ in range(members_per_group):
                group.add()
        for group in the_groups:
            await group.settled(0)
        result = CommitResult(case, committers, groups, seconds, [], 0, [], 0, {})
        version_before = delta_version(gateway.data_dir)
        meter, start = CpuMeter(gateway.process.pid), time.perf_counter()
        deadline = time.monotonic() + seconds
        members = [m for group in the_groups for m in group.members]
        await asyncio.gather(*(committer(m, deadline, result) for m in members))
        result.seconds, result.cpu = time.perf_counter() - start, meter.stop()
        result.delta_commits = delta_version(gateway.data_dir) - version_before
        result.latencies_ms.sort()
        return result
    finally:
        for group in the_groups:
            await group.leave_all()


async def bench_commits(gateway: GatewayProcess, seconds: float) -> list[CommitResult]:
    topic = "commits"
    create_topic(gateway.url, topic, COMMIT_PARTITIONS)
    cases = (("sequential", 1, 1), ("one group", COMMITTERS, 1), ("own groups", COMMITTERS, 8))
    await run_commit_case(gateway, topic, "warm-up", 1, 1, 1.0)  # table and executor warm
    results = []
    for case, committers, groups in cases:
        result = await run_commit_case(gateway, topic, case, committers, groups, seconds)
        results.append(result)
        log(
            f"  commits, {case}: {result.commits_per_s:,.0f} commits/s, "
            f"p50 {_ms(percentile(result.latencies_ms, 50))} ms, "
            f"p99 {_ms(percentile(result.latencies_ms, 99))} ms, {result.errors} errors, "
            f"{result.delta_commits} Delta commits"
        )
    return results


# ---- report ----------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _pct(cpu_s: float | None, seconds: float) -> str:
    return "-" if cpu_s is None else f"{cpu_s / seconds * 100:.0f}%"


def median_round(results: list[ConsumeResult]) -> ConsumeResult:
    ordered = sorted(results, key=lambda r: r.records_per_s)
    return ordered[(len(ordered) - 1) // 2]


def render_consume(results: list[ConsumeResult]) -> str:
    lines = [
        "| case | consumers | records | seconds | records/s | MB/s | v2 / stateless "
        "| requests | records/request | empty polls | gateway CPU | gateway CPU µs/record "
        "| client CPU | other CPU | verified | records/s of each round |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, int], list[ConsumeResult]] = {}
    for result in results:
        groups.setdefault((result.case, result.consumers), []).append(result)
    for consumers in (1, CONSUME_PARTITIONS):
        base = median_round(groups[("stateless", consumers)])
        for case in ("stateless", "v2"):
            rounds = groups[(case, consumers)]
            r = median_round(rounds)
            ratio = "-" if case == "stateless" else f"{r.records_per_s / base.records_per_s:.2f}x"
            label = "stateless fetch" if case == "stateless" else "v2 instances"
            each = " / ".join(f"{x.records_per_s:,.0f}" for x in rounds)
            lines.append(
                f"| {label} | {consumers} | {r.records:,} | {r.seconds:.2f} "
                f"| {r.records_per_s:,.0f} | {r.mb_per_s:.1f} | {ratio} | {r.requests:,} "
                f"| {r.records / max(1, r.requests - r.empty_responses):,.0f} "
                f"| {r.empty_responses} | {_pct(r.cpu['cpu_gateway_s'], r.seconds)} "
                f"| {r.cpu['cpu_gateway_s'] / r.records * 1e6:.1f} "
                f"| {_pct(r.cpu['cpu_client_s'], r.seconds)} "
                f"| {_pct(r.cpu['cpu_other_s'], r.seconds)} "
                f"| {'yes' if all(x.verified for x in rounds) else 'NO'} | {each} |"
            )
    return "\n".join(lines)


REBALANCE_LABELS = {
    "join": "(a) 4th member joins (3 -> 4)",
    "leave": "(b) clean leave, DELETE (3 -> 2)",
    "crash": "(c) heartbeats stop (3 -> 2), incl. 3 000 ms session timeout",
}


def render_rebalance(runs: list[RebalanceRun]) -> str:
    lines = [
        "| event | median ms | max ms | each run ms | generations per event |",
        "|---|---|---|---|---|",
    ]
    for event, label in REBALANCE_LABELS.items():
        times = [r.seconds * 1000 for r in runs if r.event == event]
        steps = sorted({r.generation_after - r.generation_before for r in runs if r.event == event})
        if not times:
            continue
        rows = [(label, times)]
        if event == "crash":
            rows.append(
                ("(c) excluding the session timeout", [t - SESSION_TIMEOUT_MS for t in times])
            )
        for name, values in rows:
            each = " / ".join(f"{v:,.0f}" for v in values)
            lines.append(
                f"| {name} | {statistics.median(values):,.0f} | {max(values):,.0f} | {each} "
                f"| {', '.join(map(str, steps))} |"
            )
    return "\n".join(lines)


def render_commits(results: list[CommitResult]) -> str:
    lines = [
        "| case | committers | groups | commits | commits/s | p50 ms | p99 ms | max ms "
        "| Delta commits | offset commits / Delta commit | errors | gateway CPU "
        "| gateway CPU ms/commit | client CPU | other CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lat = r.latencies_ms
        per = f"{r.commits / r.delta_commits:.1f}" if r.delta_commits > 0 else "-"
        lines.append(
            f"| {r.case} | {r.committers} | {r.groups} | {r.commits:,} | {r.commits_per_s:,.0f} "
            f"| {_ms(percentile(lat, 50))} | {_ms(percentile(lat, 99))} "
            f"| {_ms(lat[-1] if lat else None)} | {r.delta_commits:,} | {per} | {r.errors} "
            f"| {_pct(r.cpu['cpu_gateway_s'], r.seconds)} "
            f"| {_ms(r.cpu['cpu_gateway_s'] / r.commits * 1000 if r.commits else None)} "
            f"| {_pct(r.cpu['cpu_client_s'], r.seconds)} "
            f"| {_pct(r.cpu['cpu_other_s'], r.seconds)} |"
        )
    return "\n".join(lines)


# ---- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records, rounds and runs")
    parser.add_argument("--records", type=int, help="prefilled records (400 000; quick 100 000)")
    parser.add_argument("--rounds", type=int, help="consume rounds (default 3, quick 1)")
    parser.add_argument("--repeats", type=int, help="rebalance runs per event (5, quick 2)")
    parser.add_argument("--commit-seconds", type=float, help="per commit case (6, quick 3)")
    parser.add_argument("--tmp-dir", type=Path, help="parent of the temp dir (default: $TMPDIR)")
    return parser.parse_args(argv)


def _raise_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


async def run_all(gateway: GatewayProcess, args: argparse.Namespace) -> dict:
    results: dict = {}
    results["consume"], results["prefill_s"] = await bench_consume(
        gateway, args.records, args.rounds
    )
    log(f"rebalance: {args.repeats} runs per event ...")
    results["rebalance"] = await bench_rebalance(gateway.url, args.repeats)
    log(f"commits: {args.commit_seconds:g}s per case ...")
    results["commits"] = await bench_commits(gateway, args.commit_seconds)
    return results


def print_report(args, results: dict, header: dict) -> None:
    machine = header["machine"]
    print(f"command: {header['command']}")
    print(
        f"machine: {machine['nproc']} CPUs ({machine['cpu_model']}), {machine['mem_gib']} GiB, "
        f"{machine['kernel']}, python {machine['python']}, "
        + ", ".join(f"{k} {v}" for k, v in machine["packages"].items())
        + f", uvloop {machine['uvloop']}, httptools {machine['httptools']}"
    )
    dirty = " + uncommitted changes" if machine["git_uncommitted_changes"] else ""
    print(f"code: git {machine['git_commit']}{dirty}; total {header['total_s']:.0f}s")
    print(
        f"load average (1, 5, 15 min): before {header['load_before']}, after {header['load_after']}"
    )
    print()
    print(
        f"### Consume throughput ({args.records:,} records of {VALUE_BYTES} B in "
        f"{CONSUME_PARTITIONS} partitions, max_bytes {FETCH_BYTES_MAX // 2**20} MiB, median of "
        f"{args.rounds} round(s); prefill took {results['prefill_s']:.1f}s)"
    )
    print()
    print(render_consume(results["consume"]))
    print()
    print(
        f"### Rebalance time (native API, {REBALANCE_PARTITIONS} partitions, "
        f"{REBALANCE_MEMBERS} members, heartbeat {HEARTBEAT_S * 1000:.0f} ms, session timeout "
        f"{SESSION_TIMEOUT_MS} ms, {args.repeats} runs each)"
    )
    print()
    print(render_rebalance(results["rebalance"]))
    print()
    print(
        f"### Offset commits (POST /groups/{{g}}/offsets, one partition per commit, "
        f"{args.commit_seconds:g}s per case)"
    )
    print()
    print(render_commits(results["commits"]))
    for result in results["commits"]:
        for sample in result.error_samples:
            print(f"\n{result.case} error: {sample}")
    noisy = noisy_cases(results)
    if noisy:
        print()
        print(f"other processes used > {NOISY_OTHER_CPU:.0%} of a core during: {', '.join(noisy)}")


def noisy_cases(results: dict) -> list[str]:
    cases = [
        (f"{r.case} x{r.consumers} round {r.round_index + 1}", r.cpu, r.seconds)
        for r in results["consume"]
    ]
    cases += [(f"commits {r.case}", r.cpu, r.seconds) for r in results["commits"]]
    return [name for name, cpu, seconds in cases if cpu["cpu_other_s"] / seconds > NOISY_OTHER_CPU]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.records = args.records or (100_000 if args.quick else 400_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.repeats = args.repeats or (2 if args.quick else 5)
    args.commit_seconds = args.commit_seconds or (3.0 if args.quick else 6.0)
    command = shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    tmp_root = Path(tempfile.mkdtemp(prefix="lakelog-consumers-", dir=args.tmp_dir))
    header = {"command": command, "machine": machine_info(tmp_root)}
    header["load_before"] = [round(x, 2) for x in os.getloadavg()]
    log(f"command: {command}; temp dir {tmp_root}; settings linger_ms {load_settings().linger_ms}")
    cleanup = Cleanup()
    started = time.monotonic()
    try:
        gateway = cleanup.start(tmp_root / "data")
        results = asyncio.run(run_all(gateway, args))
    except BaseException:
        for gateway in cleanup.gateways:
            with contextlib.suppress(OSError):
                tail = "\n".join(gateway.log_text().splitlines()[-30:])
                log(
                    f"gateway pid {gateway.process.pid} log {gateway.log_path} (last 30 lines):"
                    f"\n{tail}"
                )
        raise
    finally:
        cleanup.stop_all()
        if os.environ.get("BENCH_KEEP_TMP"):
            log(f"kept {tmp_root}")
        else:
            shutil.rmtree(tmp_root, ignore_errors=True)
    header["total_s"] = time.monotonic() - started
    header["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print_report(args, results, header)
    return 0


if __name__ == "__main__":
    sys.exit(main())
