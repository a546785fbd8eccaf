"""Fault scenarios T1, T3 and T4 of the reliability plan (§6), each a seeded, recorded run
against real `lakelog serve` processes, ending with the checker's report and figures.

- T1: idempotent producers while the gateway is `kill -9`ed and restarted on the same data
  directory; a tailing assign-mode poller; a final drain. Recovery = kill to first acked send.
- T3: group members (native API) consuming with commits, killed repeatedly at chosen points
  (between process and commit, mid-commit, anywhere), replaced by new or static members.
- T4: retention and key compaction jobs (engine local) every few seconds during produce and
  poll traffic; probes below the log start must get 416, never shifted records.
"""

from __future__ import annotations

import itertools
import random
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from chaos.check import COMPACTED_PREFIX, CONFIG_FAULT
from chaos.checker import Report, check
from chaos.clients import AssignPoller, Endpoint, GroupMember, IdempotentProducer
from chaos.history import OK, Fault, Recorder, Send, operations
from tests.gateway_process import GatewayProcess, start_gateway

DRAIN_TIMEOUT_S = 120.0


@dataclass
class RunResult:
    """A scenario's history, the checker's report and the figures worth printing."""

    name: str
    seed: int
    history_path: Path
    report: Report
    elapsed_s: float
    faults: Counter = field(default_factory=Counter)
    recovery_ms: list[float] = field(default_factory=list)
    figures: dict[str, object] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.report.valid and not self.figures.get("violations")

    def text(self) -> str:
        lines = [
            f"scenario {self.name} seed={self.seed} elapsed={self.elapsed_s:.1f}s",
            f"history {self.history_path}",
            "faults: " + (", ".join(f"{k}={v}" for k, v in sorted(self.faults.items())) or "none"),
        ]
        if self.recovery_ms:
            lines.append(
                f"recovery ms (kill -> first ack): n={len(self.recovery_ms)} "
                f"p50={percentile(self.recovery_ms, 50):.0f} "
                f"p99={percentile(self.recovery_ms, 99):.0f} max={max(self.recovery_ms):.0f}"
            )
        lines.extend(f"{name}: {value}" for name, value in self.figures.items())
        lines.append(self.report.text())
        return "\n".join(lines)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[min(98, max(0, int(p) - 1))]


class Cluster:
    """One gateway process on a data directory that the nemesis kills and restarts."""

    def __init__(self, data_dir: Path, recorder: Recorder, env: dict[str, str] | None = None):
        self.data_dir, self.recorder, self.env = data_dir, recorder, env or {}
        self.gateway: GatewayProcess = start_gateway(data_dir, env=self.env)
        self.endpoint = Endpoint(self.gateway.url)
        self.kills: list[int] = []  # monotonic ns of each kill

    def kill_and_restart(self, down_s: float = 0.0, env: dict[str, str] | None = None) -> None:
        """kill -9, then a new process on the same data directory (new port), with `env`
        replacing the environment overrides when given."""
        if env is not None:
            self.env = env
        self.gateway.process.kill()  # kill -9 (harmless if it already exited)
        self.gateway.process.wait()
        self.kills.append(time.monotonic_ns())
        self.recorder.fault("kill", self.gateway.url)
        time.sleep(down_s)
        self.gateway = start_gateway(self.data_dir, env=self.env)
        self.endpoint.set(self.gateway.url)
        self.recorder.fault("restart", self.gateway.url)

    def stop(self) -> None:
        self.gateway.stop()


def create_topic(url: str, topic: str, partitions: int, **configs: object) -> None:
    body = {
        "topic_name": topic,
        "partitions_count": partitions,
        "configs": [{"name": k.replace("_", "."), "value": str(v)} for k, v in configs.items()],
    }
    answer = httpx.post(f"{url}/v3/clusters/lakelog/topics", json=body, timeout=30)
    answer.raise_for_status()


class Nemesis:
    """Runs `action` at random intervals in [low_s, high_s] until stopped."""

    def __init__(self, rng: random.Random, low_s: float, high_s: float, action: Callable) -> None:
        self.rng, self.low_s, self.high_s, self.action = rng, low_s, high_s, action
        self.stopped = threading.Event()
        self.errors: list[str] = []
        self.count = 0  # faults injected
        self.thread = threading.Thread(target=self._run, name="nemesis", daemon=True)

    def __enter__(self) -> Nemesis:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(120)

    def _run(self) -> None:
        while not self.stopped.wait(self.rng.uniform(self.low_s, self.high_s)):
            try:
                self.action()
                self.count += 1
            except Exception as error:  # noqa: BLE001 - a failed fault is reported, not fatal
                self.errors.append(repr(error))


def recovery_times_ms(events, kills_ns: list[int]) -> list[float]:
    """Per kill: time to the first acked send completed after it."""
    acks = sorted(e.time_ns for e in events if e.type == OK and isinstance(e.op, Send))
    times = []
    for kill in kills_ns:
        later = [t for t in acks if t > kill]
        if later:
            times.append((later[0] - kill) / 1e6)
    return times


def _workdir(base: Path | None, name: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix=f"chaos-{name}-", dir=base))
    return root


def _producers_run(
    producers: list[IdempotentProducer],
    ops: int,
    partitions: int,
    rng: random.Random,
    deadline: float,
    value_of: Callable[[str, int], tuple[str | None, str]],
) -> None:
    """Each producer sends its share of `ops` to seeded random partitions, in a thread."""
    plans = [[rng.randrange(partitions) for _ in range(ops // len(producers))] for _ in producers]

    def work(producer: IdempotentProducer, plan: list[int]) -> None:
        for index, partition in enumerate(plan):
            if time.monotonic() > deadline:
                return
            key, value = value_of(producer.name, index)
            producer.send(partition, value, key=key, deadline=deadline + 60)

    threads = [
        threading.Thread(target=work, args=(p, plan), daemon=True)
        for p, plan in zip(producers, plans, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _tail(poller: AssignPoller, partitions: int, stopped: threading.Event) -> threading.Thread:
    def loop() -> None:
        while not stopped.is_set():
            for partition in range(partitions):
                code = poller.poll(partition, timeout_ms=100)
                if code == "41601":
                    _reseek(poller, partition)
                elif code != OK:
                    time.sleep(0.05)

    thread = threading.Thread(target=loop, name=poller.name, daemon=True)
    thread.start()
    return thread


def _reseek(poller: AssignPoller, partition: int) -> None:
    try:
        start, end = poller.bounds(partition)
    except httpx.HTTPError:
        return
    position = poller.positions.get(partition, 0)
    poller.seek(partition, start if position < start else min(position, end))


def run_t1(
    *,
    seed: int,
    ops: int,
    duration_s: float = 600.0,
    producers: int = 8,
    partitions: int = 3,
    kill_every_s: tuple[float, float] = (2.0, 10.0),
    kills_min: int = 0,
    workdir: Path | None = None,
    env: dict[str, str] | None = None,
) -> RunResult:
    """T1: idempotent producers across `kill -9` + restarts; 0 anomalies expected. With
    `kills_min`, the producers send further rounds of `ops` until that many kills happened
    (or the deadline), so a fast machine cannot finish between two faults."""
    rng = random.Random(seed)
    root = _workdir(workdir, "T1")
    recorder = Recorder(root / "history.jsonl")
    started = time.monotonic()
    cluster = Cluster(root / "data", recorder, env)
    topic = f"t1-{seed}"
    create_topic(cluster.endpoint.url, topic, partitions)
    clients = [
        IdempotentProducer(f"producer-{i}", cluster.endpoint, recorder, topic)
        for i in range(producers)
    ]
    tailer = AssignPoller("tailer", cluster.endpoint, recorder, topic)
    stopped = threading.Event()
    tail_thread = _tail(tailer, partitions, stopped)
    deadline = started + duration_s
    try:
        with Nemesis(random.Random(seed + 1), *kill_every_s, cluster.kill_and_restart) as nemesis:
            for round_ in itertools.count():
                _producers_run(clients, ops, partitions, rng, deadline, _round_values(round_))
                if nemesis.count >= kills_min or time.monotonic() > deadline:
                    break
        stopped.set()
        tail_thread.join(30)
        drain = AssignPoller("drain", cluster.endpoint, recorder, topic)
        drain.drain(range(partitions), deadline=time.monotonic() + DRAIN_TIMEOUT_S)
    finally:
        stopped.set()
        cluster.stop()
        recorder.close()
    return _result("T1", seed, root, recorder, started, cluster, nemesis.errors)


def _round_values(round_: int) -> Callable[[str, int], tuple[str | None, str]]:
    """Unique values per producer, index and round (round 0 keeps the original names)."""
    if round_ == 0:
        return lambda name, index: (None, f"{name}-{index}")
    return lambda name, index: (None, f"{name}-r{round_}-{index}")


def _result(name, seed, root, recorder, started, cluster, nemesis_errors, **figures) -> RunResult:
    events = recorder.events
    compacted = {
        e.op.detail.removeprefix(COMPACTED_PREFIX)
        for e in events
        if isinstance(e.op, Fault) and e.op.kind == CONFIG_FAULT
    }
    report = check(events, compacted=compacted)
    faults = Counter(e.op.kind for e in events if isinstance(e.op, Fault) and e.type != "invoke")
    faults.pop(CONFIG_FAULT, None)
    result = RunResult(
        name, seed, root / "history.jsonl", report, time.monotonic() - started, faults
    )
    if cluster is not None:
        result.recovery_ms = recovery_times_ms(events, cluster.kills)
    result.figures.update(figures)
    if nemesis_errors:
        result.figures["nemesis errors"] = nemesis_errors[:3]
    result.figures["send errors"] = _send_errors(events)
    return result


def _send_errors(events) -> dict[str, int]:
    errors: Counter = Counter()
    for _, done in operations(events):
        if done is not None and isinstance(done.op, Send) and done.type != OK:
            errors[f"{done.type}:{done.op.error}"] += 1
    return dict(errors.most_common(6))


# ---- T3 ---------------------------------------------------------------------------------------

KILL_POINTS = ("after_process", "mid_commit", "before_fetch", "anywhere", "zombie")
ZOMBIE_PAUSE_S = 2.5  # above the 1.5 s session timeout: the member is evicted meanwhile


def run_t3(
    *,
    seed: int,
    ops: int,
    duration_s: float = 600.0,
    members: int = 3,
    partitions: int = 3,
    kill_every_s: tuple[float, float] = (1.0, 3.0),
    catch_up_s: float = 60.0,
    workdir: Path | None = None,
) -> RunResult:
    """T3: members killed mid-batch; commits checked against what the group processed."""
    rng = random.Random(seed)
    root = _workdir(workdir, "T3")
    recorder = Recorder(root / "history.jsonl")
    started = time.monotonic()
    cluster = Cluster(root / "data", recorder)
    topic, group = f"t3-{seed}", f"g3-{seed}"
    create_topic(cluster.endpoint.url, topic, partitions)
    producer = IdempotentProducer("producer", cluster.endpoint, recorder, topic)
    deadline = started + duration_s
    names = iter(range(1_000_000))

    def member(slot: int) -> GroupMember:
        static = rng.random() < 0.5
        instance = f"static-{slot}" if static else None
        name = f"member-{slot}-{next(names)}"
        return GroupMember(
            name, cluster.endpoint, recorder, group, topic, instance_id=instance, seed=seed
        ).start()

    team = [member(slot) for slot in range(members)]
    team_lock = threading.Lock()
    faults_done: list[str] = []  # the first fault is always a zombie: stale commits happen

    def kill_one() -> None:
        with team_lock:
            slot = rng.randrange(members)
            point = rng.choice(KILL_POINTS) if faults_done else "zombie"
            faults_done.append(point)
            if point == "zombie":
                team[slot].pause(ZOMBIE_PAUSE_S)
                recorder.fault("pause-member", f"{team[slot].name} for {ZOMBIE_PAUSE_S}s")
                return
            team[slot].kill(point)
            recorder.fault("kill-member", f"{team[slot].name} at {point}")
            team[slot] = member(slot)

    try:
        with Nemesis(random.Random(seed + 1), *kill_every_s, kill_one) as nemesis:
            _producers_run(
                [producer], ops, partitions, rng, deadline, lambda n, i: (None, f"{n}-{i}")
            )
            time.sleep(kill_every_s[1])
        caught_up = _wait_caught_up(cluster.endpoint.url, group, topic, partitions, catch_up_s)
        with team_lock:
            for each in team:
                each.leave()
        drain = AssignPoller("drain", cluster.endpoint, recorder, topic)
        drain.drain(range(partitions), deadline=time.monotonic() + DRAIN_TIMEOUT_S)
    finally:
        cluster.stop()
        recorder.close()
    commits = _commit_outcomes(recorder.events)
    violations = [] if caught_up else ["group did not catch up to the high watermarks"]
    return _result(
        "T3",
        seed,
        root,
        recorder,
        started,
        None,
        nemesis.errors,
        commits=commits,
        **{
            "stale commits rejected (40910/40911)": commits.get("fail:40910", 0)
            + commits.get("fail:40911", 0)
        },
        violations=violations,
    )


def _commit_outcomes(events) -> dict[str, int]:
    outcomes: Counter = Counter()
    for _, done in operations(events):
        if done is not None and done.f == "commit":
            outcomes[done.type if done.type == OK else f"{done.type}:{done.op.error}"] += 1
    return dict(outcomes)


def _wait_caught_up(url: str, group: str, topic: str, partitions: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ends = {
                p: httpx.get(f"{url}/topics/{topic}/partitions/{p}/offsets", timeout=5).json()[
                    "end_offset"
                ]
                for p in range(partitions)
            }
            stored = httpx.get(f"{url}/groups/{group}/offsets", timeout=5).json()["offsets"]
        except (httpx.HTTPError, KeyError):
            time.sleep(0.2)
            continue
        committed = {o["partition"]: o["offset"] for o in stored if o["topic"] == topic}
        if all(committed.get(p) == end for p, end in ends.items()):
            return True
        time.sleep(0.2)
    return False


# ---- T4 ---------------------------------------------------------------------------------------


def run_t4(
    *,
    seed: int,
    ops: int,
    duration_s: float = 600.0,
    jobs_every_s: float = 2.0,
    keys: int = 13,
    workdir: Path | None = None,
) -> RunResult:
    """T4: retention + compaction jobs during produce and poll traffic."""
    from jobs.runner import JobRequest, run_job  # Spark-free with engine local

    rng = random.Random(seed)
    root = _workdir(workdir, "T4")
    recorder = Recorder(root / "history.jsonl")
    started = time.monotonic()
    cluster = Cluster(root / "data", recorder)
    url = cluster.endpoint.url
    kept, compacted = f"t4-ret-{seed}", f"t4-cmp-{seed}"
    create_topic(url, kept, 1, segment_bytes=3000, retention_bytes=6000)
    create_topic(
        url,
        compacted,
        1,
        segment_bytes=2000,
        cleanup_policy="compact",
        delete_retention_ms=0,
        min_compaction_lag_ms=0,
    )
    recorder.fault(CONFIG_FAULT, f"{COMPACTED_PREFIX}{compacted}")
    deadline = started + duration_s
    stopped = threading.Event()
    pollers = [AssignPoller(f"tail-{t}", cluster.endpoint, recorder, t) for t in (kept, compacted)]
    tails = [_tail(poller, 1, stopped) for poller in pollers]
    probes: Counter = Counter()
    job_failures: list[str] = []

    def jobs() -> None:
        for job in ("retention", "compact-keys"):
            summary = run_job(
                JobRequest(job=job, root=str(cluster.data_dir), topics=(kept, compacted)),
                out=lambda line: None,
            )
            recorder.fault("job", summary.line())
            if summary.failed:
                job_failures.append(summary.line())
        probes.update(_probe_below_log_start(cluster.endpoint, recorder, kept))

    def value_of(name: str, index: int) -> tuple[str, str]:
        key = f"k{rng.randrange(keys)}"
        return key, f"{name}-{index}|{key}|" + "x" * 150

    try:
        with Nemesis(random.Random(seed + 1), jobs_every_s, jobs_every_s, jobs) as nemesis:
            threads = [
                threading.Thread(
                    target=_producers_run,
                    args=(
                        [IdempotentProducer(f"producer-{t}", cluster.endpoint, recorder, t)],
                        ops // 2,
                        1,
                        random.Random(seed + n),
                        deadline,
                        value_of,
                    ),
                )
                for n, t in enumerate((kept, compacted))
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        jobs()  # once more after the traffic: the final read sees a compacted, trimmed log
        time.sleep(1.5)  # the gateway notices the jobs' commits (foreign-commit check)
        stopped.set()
        for tail in tails:
            tail.join(30)
        for topic in (kept, compacted):
            drain = AssignPoller(f"drain-{topic}", cluster.endpoint, recorder, topic)
            drain.drain(range(1), deadline=time.monotonic() + DRAIN_TIMEOUT_S)
        probes.update(_probe_below_log_start(cluster.endpoint, recorder, kept))
    finally:
        stopped.set()
        cluster.stop()
        recorder.close()
    violations = [f"probe below log start answered {k}" for k in probes if k not in ("416", "-")]
    violations += job_failures
    return _result(
        "T4",
        seed,
        root,
        recorder,
        started,
        None,
        nemesis.errors,
        **{
            "probes below log start": dict(probes),
            "416 seen by tailers": sum(p.out_of_range for p in pollers),
        },
        violations=violations,
    )


def _probe_below_log_start(endpoint: Endpoint, recorder: Recorder, topic: str) -> Counter:
    """Fetches at log start - 1: must be 416 41601, never records from another offset.

    A 200 is recorded as an assign-mode poll from that offset, so the checker reports the
    shifted records as a poll-skip."""
    poller = AssignPoller("probe", endpoint, recorder, topic)
    try:
        start, _ = poller.bounds(0)
    except httpx.HTTPError:
        return Counter({"unreachable": 1})
    if start == 0:
        return Counter({"-": 1})
    poller.seek(0, start - 1)
    code = poller.poll(0, timeout_ms=0)
    return Counter({"416" if code == "41601" else code: 1})


SCENARIOS = {"T1": run_t1, "T3": run_t3, "T4": run_t4}

__all__ = ["SCENARIOS", "RunResult", "run_t1", "run_t3", "run_t4"]
