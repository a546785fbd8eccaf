"""T5 disk faults against a real gateway process.

(a) Full disk: the data directory is a 64 MB tmpfs. Produce until the disk is full: the failing
produce is a retriable 503/50003 (never a 200 for a record that is not durably committed), other
topics keep serving reads, and once space is freed produce works again and every acknowledged
record is readable exactly once at its offset, also after a restart.

(b) Corruption of one partition (truncated or zeroed latest `_delta_log/N.json`, a bit-flipped
data file, a corrupt `_last_checkpoint`): that partition fails loudly or serves exactly what was
acked, never a 200 with wrong or missing data; the other partition is unaffected.

(a) needs root (mount); it is skipped with the reason otherwise.
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import BINARY_V2, create_topic
from tests.gateway_process import start_gateway

pytestmark = pytest.mark.gateway

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


def _produce(http: httpx.Client, topic: str, values: list[bytes]) -> httpx.Response:
    records = [{"value": base64.b64encode(value).decode()} for value in values]
    return http.post(
        f"/topics/{topic}/partitions/0",
        json={"records": records},
        headers={"Content-Type": BINARY_V2},
    )


def _read_all(http: httpx.Client, topic: str) -> list[tuple[int, bytes]]:
    """Every record of partition 0 as (offset, value), following the fetch position."""
    records, offset = [], 0
    while True:
        response = http.get(
            f"/topics/{topic}/partitions/0/records",
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


def _assert_acked_readable_once(http, topic: str, acked: dict[int, bytes]) -> None:
    records = _read_all(http, topic)
    offsets = [offset for offset, _ in records]
    assert offsets == list(range(len(offsets))), "offsets are not dense from 0"
    by_offset = dict(records)
    for offset, value in acked.items():
        assert by_offset.get(offset) == value, f"acked offset {offset} lost or changed"
    values = [value for _, value in records]
    assert len(set(values)) == len(values), "a value is stored twice"


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
