"""T5 disk faults against a real gateway process.

(a) Full disk: the data directory is a 64 MB tmpfs. Produce until the disk is full: the failing
produce is a retriable 503/50003 (never a 200 for a record that is not durably committed), other
topics keep serving reads, and once space is freed produce works again and every acknowledged
record is readable exactly once at its offset, also after a restart.

(b) Corruption of one partition (truncated or zeroed latest `_delta_log/N.json`, a bit-flipped
data file, a corrupt `_last_checkpoint`): that partition fails loudly or serves exactly what was
acked, never a 200 with wrong or missing data; the other partition is unaffected. A truncated or
zeroed checkpoint is a 500/50002 that names the file and says what to do; done, every acked
record is back.

(c) A checkpoint killed midway (SIGKILL at random points, and the leftovers a kill can leave)
loses, duplicates and renumbers nothing. ENOSPC exactly at the commit-file write is a retriable
503 that commits nothing; the retry commits the record once.

(a) and the ENOSPC test need root (mount); they are skipped with the reason otherwise.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import math
import os
import random
import resource
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from storage_layout.errors import CorruptPartition, StorageUnavailable
from storage_layout.log import DeltaPartitionLog, checkpoint_table, load_table
from storage_layout.records import NewRecord
from storage_layout.store.local import LocalStore
from storage_layout.topic_config import TopicConfig
from tests.conftest import BINARY_V2, create_topic
from tests.gateway_process import start_gateway

TMPFS_BYTES = 64 * 1024 * 1024
BALLAST_BYTES = 12 * 1024 * 1024  # freed after the disk is full
RECORD_BYTES = 256 * 1024
RECORDS_PER_REQUEST = 4
REQUESTS_MAX = 80  # 80 MB offered to a 64 MB disk


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A 64 MB tmpfs mounted for this test (unmounted after)."""
    mount_point = tmp_path / "disk" / "data"
    mount_point.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _produce(
    http: httpx.Client, topic: str, values: list[bytes], partition: int = 0
) -> httpx.Response:
    records = [{"value": base64.b64encode(value).decode()} for value in values]
    return http.post(
        f"/topics/{topic}/partitions/{partition}",
        json={"records": records},
        headers={"Content-Type": BINARY_V2},
    )


def _produce_and_read_after_a_restart(data_dir: Path, topic: str, acked: dict[int, bytes]) -> None:
    """A restarted gateway (which loads the tables afresh) takes a produce on partition 0
    and reads every acked record there exactly once."""
    restarted = start_gateway(data_dir)
    try:
        with httpx.Client(base_url=restarted.url, timeout=60.0) as http:
            acked |= _produce_acked(http, topic, [b"restarted"])
            _assert_acked_readable_once(http, topic, acked, only_acked=True)
    finally:
        restarted.stop()


def _produce_acked(
    http: httpx.Client, topic: str, values: list[bytes], partition: int = 0
) -> dict[int, bytes]:
    """Produce each value in a request (a commit) of its own; {offset: value} of the acks."""
    acked = {}
    for value in values:
        response = _produce(http, topic, [value], partition)
        assert response.status_code == 200, response.text
        acked[response.json()["offsets"][0]["offset"]] = value
    return acked


def _read_all(http: httpx.Client, topic: str, partition: int = 0) -> list[tuple[int, bytes]]:
    """Every record of a partition as (offset, value), following the fetch position."""
    records, offset = [], 0
    while True:
        response = http.get(
            f"/topics/{topic}/partitions/{partition}/records",
            params={"offset": offset, "max_bytes": 8 * 1024 * 1024},
            headers={"Accept": BINARY_V2},
        )
        if response.status_code == 416:  # past the high watermark: done
            return records
        assert response.status_code == 200, response.text
        batch = response.json()
        if not batch:
            return records
        records += [(r["offset"], base64.b64decode(r["value"])) for r in batch]
        offset = batch[-1]["offset"] + 1


def _assert_acked_readable_once(
    http, topic: str, acked: dict[int, bytes], partition: int = 0, *, only_acked: bool = False
) -> None:
    """Every acked record at its offset, dense offsets from 0, no value twice; with
    `only_acked`, nothing else either (every failed produce was definite)."""
    _assert_holds_acked(_read_all(http, topic, partition), acked, only_acked)


def _assert_holds_acked(records, acked: dict[int, bytes], only_acked: bool) -> None:
    offsets = [offset for offset, _ in records]
    assert offsets == list(range(len(offsets))), "offsets are not dense from 0"
    by_offset = dict(records)
    for offset, value in acked.items():
        assert by_offset.get(offset) == value, f"acked offset {offset} lost or changed"
    values = [value for _, value in records]
    assert len(set(values)) == len(values), "a value is stored twice"
    if only_acked:
        assert by_offset == acked, f"{len(records)} records stored, {len(acked)} acked"


@pytest.mark.gateway
def test_full_disk_refuses_produce_retriably_and_recovers(small_disk):
    """ENOSPC: produce answers 503/50003, no 200 without a durable commit; other topics still
    read; after space is freed produce works and every acked record is there exactly once."""
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * BALLAST_BYTES)
    gateway = start_gateway(small_disk)
    try:
        with httpx.Client(base_url=gateway.url, timeout=60.0) as http:
            create_topic(http, "full")
            create_topic(http, "other")
            assert _produce(http, "other", [b"other-0"]).status_code == 200
            acked: dict[int, bytes] = {}
            failure = None
            for _ in range(REQUESTS_MAX):
                values = [os.urandom(RECORD_BYTES) for _value in range(RECORDS_PER_REQUEST)]
                response = _produce(http, "full", values)
                if response.status_code != 200:
                    failure = response
                    break
                for entry, value in zip(response.json()["offsets"], values, strict=True):
                    assert entry["error_code"] is None, response.text
                    acked[entry["offset"]] = value
            assert failure is not None, f"{REQUESTS_MAX} requests fit on a {TMPFS_BYTES} disk"
            assert failure.status_code in (503, 507), failure.text
            assert failure.json()["error_code"] in (50003, 507), failure.text
            assert gateway.process.poll() is None, gateway.log_text()[-4000:]

            # Other topics keep serving reads while the disk is full.
            other = http.get(
                "/topics/other/partitions/0/records",
                params={"offset": 0},
                headers={"Accept": BINARY_V2},
            )
            assert other.status_code == 200, other.text
            assert base64.b64decode(other.json()[0]["value"]) == b"other-0"

            ballast.unlink()
            deadline = time.monotonic() + 30
            while True:
                value = os.urandom(1024)
                response = _produce(http, "full", [value])
                if response.status_code == 200:
                    acked[response.json()["offsets"][0]["offset"]] = value
                    break
                assert response.status_code in (503, 507), response.text
                assert time.monotonic() < deadline, f"produce did not recover: {response.text}"
                time.sleep(0.5)
            _assert_acked_readable_once(http, "full", acked)
    finally:
        gateway.stop()

    restarted = start_gateway(small_disk)
    try:
        with httpx.Client(base_url=restarted.url, timeout=60.0) as http:
            _assert_acked_readable_once(http, "full", acked)
    finally:
        restarted.stop()


def _latest_commit(table: Path) -> Path:
    return max((table / "_delta_log").glob("*.json"), key=lambda p: int(p.stem))


def _flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.gateway
@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param(
            lambda t: _latest_commit(t).write_bytes(b""),
            id="truncated-commit",  # was served silently without its record (found here)
        ),
        pytest.param(
            lambda t: _latest_commit(t).write_bytes(b"\0" * _latest_commit(t).stat().st_size),
            id="zeroed-commit",
        ),
        pytest.param(
            lambda t: _flip_middle_byte(max(t.rglob("*.parquet"), key=lambda p: p.stat().st_size)),
            id="bit-flipped-data-file",
        ),
        pytest.param(
            lambda t: (t / "_delta_log" / "_last_checkpoint").write_bytes(b"{garbage"),
            id="corrupt-last-checkpoint",
        ),
    ],
)
def test_corruption_fails_the_partition_loudly_and_spares_the_others(tmp_path, corrupt):
    """A corrupted partition never serves wrong data or a 200 with garbage: its reads fail
    (or serve exactly what was acked); the other partition of the topic is unaffected."""
    data_dir = tmp_path / "data"
    gateway = start_gateway(data_dir)
    values = {p: [f"p{p}-{i}".encode() * 100 for i in range(3)] for p in (0, 1)}
    try:
        with httpx.Client(base_url=gateway.url, timeout=60.0) as http:
            create_topic(http, "corrupt", partitions=2)
            for partition, partition_values in values.items():
                for value in partition_values:  # one commit each
                    path = f"/topics/corrupt/partitions/{partition}"
                    body = {"records": [{"value": base64.b64encode(value).decode()}]}
                    answer = http.post(path, json=body, headers={"Content-Type": BINARY_V2})
                    assert answer.status_code == 200, answer.text
    finally:
        gateway.stop()
    corrupt(data_dir / "topics" / "corrupt" / "0")
    gateway = start_gateway(data_dir)
    try:
        with httpx.Client(base_url=gateway.url, timeout=60.0) as http:
            response = http.get(
                "/topics/corrupt/partitions/0/records",
                params={"offset": 0},
                headers={"Accept": BINARY_V2},
            )
            if response.status_code == 200:  # only acceptable if exactly what was acked
                served = [base64.b64decode(r["value"]) for r in response.json()]
                assert served == values[0], f"served {len(served)} of 3 acked records, 200"
            else:
                assert response.status_code >= 500, response.text
                assert response.json()["error_code"] in (50002, 50003), response.text
            other = http.get(
                "/topics/corrupt/partitions/1/records",
                params={"offset": 0},
                headers={"Accept": BINARY_V2},
            )
            assert other.status_code == 200, other.text
            assert [base64.b64decode(r["value"]) for r in other.json()] == values[1]
            assert gateway.process.poll() is None
    finally:
        gateway.stop()


# ---- checkpoints: damaged, killed midway -------------------------------------------------------


def _fetch(http: httpx.Client, topic: str, partition: int) -> httpx.Response:
    return http.get(
        f"/topics/{topic}/partitions/{partition}/records",
        params={"offset": 0},
        headers={"Accept": BINARY_V2},
    )


def _newest_checkpoint(table: Path) -> Path:
    checkpoints = (table / "_delta_log").glob("*.checkpoint.parquet")
    return max(checkpoints, key=lambda path: int(path.name.split(".")[0]))


def _truncate_half(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _zero(path: Path) -> None:
    path.write_bytes(b"\0" * path.stat().st_size)


def _overwrite_footer_length(path: Path) -> None:
    """Magic intact, footer length past the file: only decoding it finds the damage."""
    data = bytearray(path.read_bytes())
    data[-8:-4] = struct.pack("<I", len(data) * 4)
    path.write_bytes(bytes(data))


CHECKPOINT_DAMAGE = {  # by partition
    0: ("truncated", _truncate_half),
    1: ("zeroed", _zero),
    2: ("footer length overwritten", _overwrite_footer_length),
}
HEALTHY_PARTITION = 3


@contextlib.contextmanager
def _case(name: str):
    """Name the case (a partition's fault) in an assertion failure."""
    try:
        yield
    except AssertionError as error:
        error.add_note(f"case: {name}")
        raise


def _assert_refused_as_corrupt(response: httpx.Response, checkpoint: Path) -> None:
    assert response.status_code == 500, response.text
    body = response.json()
    assert body["error_code"] == 50002, body
    assert str(checkpoint) in body["message"], body  # names the file...
    assert "delete the damaged checkpoint" in body["message"], body  # ...and what to do


@pytest.mark.gateway
def test_damaged_checkpoint_fails_its_partition_with_advice_until_removed(tmp_path):
    """A truncated, zeroed or undecodable checkpoint: fetch and produce on its partition
    answer 500/50002 naming the file and what to do (they were 503s, retried forever); the
    healthy partition serves. Once the damaged checkpoint and `_last_checkpoint` are deleted
    as advised, the same gateway reads every acked record exactly once and the refused
    produce left nothing."""
    data_dir = tmp_path / "data"
    partitions = [*CHECKPOINT_DAMAGE, HEALTHY_PARTITION]
    tables = {p: data_dir / "topics" / "ckpt" / str(p) for p in partitions}
    gateway = start_gateway(data_dir)
    try:
        with httpx.Client(base_url=gateway.url, timeout=60.0) as http:
            create_topic(http, "ckpt", partitions=len(partitions))
            acked = {
                p: _produce_acked(http, "ckpt", [f"p{p}-{i}".encode() for i in range(3)], p)
                for p in partitions
            }
    finally:
        gateway.stop()
    for table in tables.values():
        checkpoint_table(str(table))  # what `lakelog jobs` does for idle partitions
    for partition, (_, damage) in CHECKPOINT_DAMAGE.items():
        damage(_newest_checkpoint(tables[partition]))
    gateway = start_gateway(data_dir)
    try:
        with httpx.Client(base_url=gateway.url, timeout=60.0) as http:
            for partition, (kind, _) in CHECKPOINT_DAMAGE.items():
                with _case(kind):
                    checkpoint = _newest_checkpoint(tables[partition])
                    _assert_refused_as_corrupt(_fetch(http, "ckpt", partition), checkpoint)
                    refused = _produce(http, "ckpt", [b"refused"], partition)
                    _assert_refused_as_corrupt(refused, checkpoint)
            healthy = HEALTHY_PARTITION
            acked[healthy] |= _produce_acked(http, "ckpt", [b"healthy-after"], healthy)
            _assert_acked_readable_once(http, "ckpt", acked[healthy], healthy, only_acked=True)
            for partition, (kind, _) in CHECKPOINT_DAMAGE.items():
                with _case(kind):
                    _newest_checkpoint(tables[partition]).unlink()  # the operator's repair
                    (tables[partition] / "_delta_log" / "_last_checkpoint").unlink()
                    acked[partition] |= _produce_acked(http, "ckpt", [b"repaired"], partition)
                    _assert_acked_readable_once(
                        http, "ckpt", acked[partition], partition, only_acked=True
                    )
    finally:
        gateway.stop()


@pytest.mark.gateway
def test_produce_under_a_corrupt_last_checkpoint_is_acked_once(tmp_path):
    """A garbage `_last_checkpoint` under a running gateway: produce still answers 200 and each
    record is stored once, also after a restart. (The writer committed the record, then parsed
    the hint to check the commit was not below a checkpoint and answered 500: a client
    retrying that definite failure wrote the record twice. Found here.)"""
    data_dir = tmp_path / "data"
    table = data_dir / "topics" / "hint" / "0"
    gateway = start_gateway(data_dir)
    try:
        with httpx.Client(base_url=gateway.url, timeout=60.0) as http:
            create_topic(http, "hint")
            acked = _produce_acked(http, "hint", [b"before-0", b"before-1"])
            checkpoint_table(str(table))
            (table / "_delta_log" / "_last_checkpoint").write_bytes(b"{garbage")
            acked |= _produce_acked(http, "hint", [b"after-0", b"after-1"])
            _assert_acked_readable_once(http, "hint", acked, only_acked=True)
    finally:
        gateway.stop()
    _produce_and_read_after_a_restart(data_dir, "hint", acked)


# The child prints "ready" once its imports are done, so the kill delay covers the checkpoint.
CHECKPOINT_CHILD = """
import sys
from storage_layout.log import checkpoint_table
print("ready", flush=True)
checkpoint_table(sys.argv[1])
"""
KILL_ROUNDS = 6
REPO_DIR = Path(__file__).resolve().parents[2]


def _checkpoint_child(table: Path, kill_after_s: float | None) -> tuple[int, float]:
    """`checkpoint_table` in a child process, SIGKILLed `kill_after_s` after its imports (None:
    left to finish). Its exit code (-SIGKILL when the kill came first) and seconds from the
    end of its imports to its exit."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHECKPOINT_CHILD, str(table)],
        cwd=REPO_DIR,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "ready"
    started = time.monotonic()
    if kill_after_s is not None:
        time.sleep(kill_after_s)
        child.send_signal(signal.SIGKILL)
    code = child.wait(30)
    child.stdout.close()
    return code, time.monotonic() - started


def _assert_table_holds(table: Path, acked: dict[int, bytes]) -> None:
    """A fresh open of the table (what a restarted gateway does) reads exactly `acked`."""
    read = DeltaPartitionLog.open(str(table)).read(
        from_offset=0, records_max=1_000_000, bytes_max=1 << 30
    )
    records = read.records.select(["offset", "value"]).to_pydict()
    _assert_holds_acked(list(zip(*records.values(), strict=True)), acked, only_acked=True)


@pytest.mark.gateway
def test_checkpoint_killed_midway_loses_and_duplicates_nothing(tmp_path):
    """SIGKILL the checkpoint of a served partition at seeded random points within the time a
    whole one takes (the kills land while it loads, writes, or cleans the log up), round after
    round: after each, the gateway and a fresh open of the table hold every acked record once
    at dense offsets and produce goes on; so does a restarted gateway. At least one kill must
    land before the checkpoint finished, or the test proves nothing."""
    rng = random.Random(20250105)
    data_dir = tmp_path / "data"
    table = data_dir / "topics" / "killed" / "0"
    gateway = start_gateway(data_dir)
    try:
        with httpx.Client(base_url=gateway.url, timeout=60.0) as http:
            create_topic(http, "killed")
            acked = _produce_acked(http, "killed", [f"before-{i}".encode() for i in range(12)])
            # Kill points spread over how long a whole checkpoint takes on this machine now.
            code, checkpoint_s = _checkpoint_child(table, None)
            assert code == 0
            exit_codes = []
            for round_number in range(KILL_ROUNDS):
                delay_s = rng.uniform(0, checkpoint_s)
                exit_codes.append(_checkpoint_child(table, delay_s)[0])
                with _case(f"round {round_number}, killed after {delay_s:.3f} s"):
                    acked |= _produce_acked(http, "killed", [f"round-{round_number}".encode()])
                    _assert_acked_readable_once(http, "killed", acked, only_acked=True)
                    _assert_table_holds(table, acked)
            assert -signal.SIGKILL in exit_codes, f"every checkpoint finished: {exit_codes}"
    finally:
        gateway.stop()
    _produce_and_read_after_a_restart(data_dir, "killed", acked)


def _restore_hint(log_dir: Path, hint: bytes | None) -> None:
    path = log_dir / "_last_checkpoint"
    if hint is None:
        path.unlink(missing_ok=True)
    else:
        path.write_bytes(hint)


def _torn_temporary(log_dir: Path, checkpoint: Path, hint: bytes | None) -> None:
    """Killed while writing it: delta-rs writes `<name>#1` and renames it, so half of the
    temporary is left and `_last_checkpoint` is the one before."""
    data = checkpoint.read_bytes()
    checkpoint.unlink()
    checkpoint.with_name(checkpoint.name + "#1").write_bytes(data[: len(data) // 2])
    _restore_hint(log_dir, hint)


def _hint_not_updated(log_dir: Path, checkpoint: Path, hint: bytes | None) -> None:
    """Killed after the checkpoint was renamed into place, while writing `_last_checkpoint`."""
    (log_dir / "_last_checkpoint#1").write_bytes(b'{"version":')
    _restore_hint(log_dir, hint)


def _hint_to_missing_checkpoint(log_dir: Path, checkpoint: Path, hint: bytes | None) -> None:
    """`_last_checkpoint` names a checkpoint that is gone (only the file was deleted)."""
    checkpoint.unlink()


# partition -> (case, an earlier complete checkpoint?, what the killed checkpoint left)
LEFTOVERS = {
    0: ("torn-temporary, older hint", True, _torn_temporary),
    1: ("torn-temporary, no hint", False, _torn_temporary),
    2: ("hint not updated", True, _hint_not_updated),
    3: ("hint never written", False, _hint_not_updated),
    4: ("hint names a missing checkpoint", True, _hint_to_missing_checkpoint),
}


def _leave_killed_checkpoint(table: Path, leftover) -> None:
    log_dir = table / "_delta_log"
    hint_path = log_dir / "_last_checkpoint"
    hint = hint_path.read_bytes() if hint_path.exists() else None
    checkpoint_table(str(table))
    leftover(log_dir, _newest_checkpoint(table), hint)


@pytest.mark.gateway
def test_killed_checkpoint_leftovers_lose_and_duplicate_nothing(tmp_path):
    """What a killed checkpoint can leave (a torn temporary with an older or no
    `_last_checkpoint`, a checkpoint whose hint was not updated) and a hint naming a missing
    checkpoint, one per partition: the running gateway and a restarted one serve every acked
    record once at dense offsets, and produce goes on. (The missing-checkpoint hint made every
    load fail with a 503, for ever; it is now dropped, as the hint is only a shortcut.)"""
    data_dir = tmp_path / "data"
    tables = {p: data_dir / "topics" / "leftover" / str(p) for p in LEFTOVERS}
    acked: dict[int, dict[int, bytes]] = {}
    gateway = start_gateway(data_dir)
    try:
        with httpx.Client(base_url=gateway.url, timeout=60.0) as http:
            create_topic(http, "leftover", partitions=len(LEFTOVERS))
            for partition, (case, earlier_checkpoint, leftover) in LEFTOVERS.items():
                with _case(case):
                    values = [f"{case}-{i}".encode() for i in range(6)]
                    acked[partition] = _produce_acked(http, "leftover", values[:3], partition)
                    if earlier_checkpoint:
                        checkpoint_table(str(tables[partition]))
                    acked[partition] |= _produce_acked(http, "leftover", values[3:], partition)
                    _leave_killed_checkpoint(tables[partition], leftover)
                    acked[partition] |= _produce_acked(http, "leftover", [b"after"], partition)
                    _assert_acked_readable_once(
                        http, "leftover", acked[partition], partition, only_acked=True
                    )
    finally:
        gateway.stop()
    restarted = start_gateway(data_dir)
    try:
        with httpx.Client(base_url=restarted.url, timeout=60.0) as http:
            for partition, (case, _, _) in LEFTOVERS.items():
                with _case(case):
                    acked[partition] |= _produce_acked(http, "leftover", [b"restarted"], partition)
                    _assert_acked_readable_once(
                        http, "leftover", acked[partition], partition, only_acked=True
                    )
    finally:
        restarted.stop()


# ---- ENOSPC exactly at the commit-file write ---------------------------------------------------

# No liveness record rewrites (a staging file each heartbeat) compete for the last free blocks.
QUIET_NODE_ENV = {"LAKELOG_HEARTBEAT_MS": "60000", "LAKELOG_LEASE_MS": "600000"}
RETRIED_VALUE = b"retried-" * 64


def _leave_free_blocks(ballast: Path, blocks: int) -> None:
    """Fill the file system with `ballast`, then free exactly `blocks` blocks of it."""
    block_bytes = os.statvfs(ballast.parent).f_frsize
    descriptor = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:  # whole blocks, unbuffered: the file ends at a block boundary
            os.write(descriptor, b"\0" * block_bytes)
    except OSError as error:
        assert error.errno == errno.ENOSPC, error
    finally:
        os.close(descriptor)
    os.truncate(ballast, ballast.stat().st_size - blocks * block_bytes)
    assert os.statvfs(ballast.parent).f_bavail == blocks


def _produce_failing_at_the_commit_write(http, table: Path, ballast: Path) -> httpx.Response:
    """Produce RETRIED_VALUE with just the blocks its data file needs free: the data file is
    written, the commit file after it is not (one block more if the file came out larger)."""
    block_bytes = os.statvfs(table).f_frsize
    data_bytes = max(path.stat().st_size for path in table.rglob("*.parquet"))
    for blocks in (math.ceil(data_bytes / block_bytes), math.ceil(data_bytes / block_bytes) + 1):
        commits = len(list((table / "_delta_log").glob("*.json")))
        data_files = len(list(table.rglob("*.parquet")))
        _leave_free_blocks(ballast, blocks)
        response = _produce(http, "enospc", [RETRIED_VALUE])
        assert response.status_code == 503, response.text  # never a 200 without its commit
        if "Commit to" in response.json()["message"]:  # not "Cannot write <data file>"
            assert len(list((table / "_delta_log").glob("*.json"))) == commits
            assert len(list(table.rglob("*.parquet"))) == data_files + 1  # the orphan
            return response
        ballast.unlink()
    pytest.fail("the data file never fitted while its commit did not")


@pytest.mark.gateway
def test_enospc_at_the_commit_write_is_retriable_and_commits_nothing(small_disk):
    """ENOSPC exactly when the commit file is written (its data file fitted): 503/50003, nothing
    committed; once space is freed, the retry of the same record is acked and it is stored
    once, after the earlier acked records, also after a restart."""
    ballast = small_disk / "ballast"
    table = small_disk / "topics" / "enospc" / "0"
    gateway = start_gateway(small_disk, env=QUIET_NODE_ENV)
    try:
        with httpx.Client(base_url=gateway.url, timeout=60.0) as http:
            create_topic(http, "enospc")
            values = [f"acked-{i}-".encode() * 64 for i in range(3)]  # as large as the retry
            acked = _produce_acked(http, "enospc", values)
            failure = _produce_failing_at_the_commit_write(http, table, ballast)
            assert failure.json()["error_code"] == 50003, failure.text
            assert "No space left" in failure.json()["message"], failure.text
            ballast.unlink()
            acked |= _produce_acked(http, "enospc", [RETRIED_VALUE])
            _assert_acked_readable_once(http, "enospc", acked, only_acked=True)
    finally:
        gateway.stop()
    restarted = start_gateway(small_disk, env=QUIET_NODE_ENV)
    try:
        with httpx.Client(base_url=restarted.url, timeout=60.0) as http:
            _assert_acked_readable_once(http, "enospc", acked, only_acked=True)
    finally:
        restarted.stop()


def test_a_write_cut_short_by_a_full_disk_leaves_no_part_behind(small_disk):
    """ENOSPC in the middle of a data file's write (an append's or a merge's): the write fails,
    and the part written is gone. Nothing names it, so nothing would delete it, and each
    failed merge's part would take the space freed since."""
    store = LocalStore(str(small_disk))
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    (small_disk / "ballast").write_bytes(b"\0" * (free - 2 * 1024 * 1024))
    with pytest.raises(OSError) as raised:
        store.put_new("segment=0/part-big.parquet", os.urandom(4 * 1024 * 1024))
    assert raised.value.errno == errno.ENOSPC
    assert not (small_disk / "segment=0" / "part-big.parquet").exists()
    store.put_new("segment=0/part-small.parquet", b"fits")  # the space is there again
    assert (small_disk / "segment=0" / "part-small.parquet").read_bytes() == b"fits"


# ---- a transient I/O error stays retriable -----------------------------------------------------


@contextlib.contextmanager
def _file_descriptors_exhausted():
    """Every file descriptor this process may open in use: EMFILE, a real I/O error that
    clears by itself."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 16, hard))
    held = []
    try:
        with contextlib.suppress(OSError):
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for descriptor in held:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_io_error_loading_a_table_stays_retriable(tmp_path):
    """An I/O error while loading a partition table is StorageUnavailable (retriable), with an
    intact checkpoint and with a damaged one: only a checkpoint that could be read and is not
    Parquet is CorruptPartition (then, once the I/O error has cleared)."""
    uri = str(tmp_path / "topic" / "0")
    DeltaPartitionLog.create(uri)
    DeltaPartitionLog.open(uri).append([NewRecord(None, b"value")], config=TopicConfig())
    checkpoint_table(uri)
    with _file_descriptors_exhausted(), pytest.raises(StorageUnavailable):
        load_table(uri)
    _zero(_newest_checkpoint(Path(uri)))
    with _file_descriptors_exhausted(), pytest.raises(StorageUnavailable):
        load_table(uri)
    with pytest.raises(CorruptPartition, match="checkpoint 1 is damaged"):
        load_table(uri)
