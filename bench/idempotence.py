"""Produce throughput with idempotence on vs off, in one run over one gateway process.

Cases: 100 and 1000 records per request (100-byte values, 8-byte keys), N connections (default 8),
each a thread with one keep-alive httpx.Client posting v2 binary bodies to
`/topics/{t}/partitions/0` of a fresh 1-partition topic per case. "on": each connection first
gets its own producer id (`POST /v3/clusters/lakelog/producers`) and every request carries
`producer_id`, `producer_epoch` and the next `base_sequence`; "off": plain bodies. Cases run in
rounds (default 2), off then on per batch size, and the best round of each case counts. Each case
is verified afterwards: the high watermark equals the records acknowledged.

Usage: .venv/bin/python bench/idempotence.py [--seconds S] [--rounds R] [--connections N]
Progress goes to stderr, the results table to stdout.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.produce_fetch import (  # noqa: E402
    CLUSTER,
    HTTP_TIMEOUT_S,
    PRODUCE_TYPE,
    create_topic,
    encode_body,
    high_watermark,
    log,
    machine_info,
    make_batches,
)
from tests.gateway_process import start_gateway  # noqa: E402

BATCH_SIZES = (100, 1000)


class _Producer(threading.Thread):
    """One connection producing until `deadline`; counts acknowledged records."""

    def __init__(self, url, topic, bodies, batch, idempotent, start_at, deadline) -> None:
        super().__init__(daemon=True)
        self.url, self.topic, self.bodies, self.batch = url, topic, bodies, batch
        self.idempotent, self.start_at, self.deadline = idempotent, start_at, deadline
        self.records, self.error = 0, None

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.url, timeout=HTTP_TIMEOUT_S) as http:
                self._produce(http)
        except Exception as error:  # reported by the main thread
            self.error = error

    def _produce(self, http: httpx.Client) -> None:
        prefix = b"{"
        if self.idempotent:
            ids = http.post(f"/v3/clusters/{CLUSTER}/producers").json()
            prefix = b'{"producer_id":%d,"producer_epoch":%d,' % (
                ids["producer_id"],
                ids["producer_epoch"],
            )
        path, headers = f"/topics/{self.topic}/partitions/0", {"Content-Type": PRODUCE_TYPE}
        sequence, sent = 0, 0
        while time.monotonic() < self.start_at:
            time.sleep(0.001)
        while time.monotonic() < self.deadline:
            body = self.bodies[sent % len(self.bodies)]
            if self.idempotent:
                body = prefix + b'"base_sequence":%d,' % sequence + body[1:]
            response = http.post(path, content=body, headers=headers)
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
            sequence += self.batch
            sent += 1
            self.records += self.batch


def run_case(url: str, topic: str, batch: int, idempotent: bool, args, bodies) -> float:
    create_topic(url, topic)
    start_at = time.monotonic() + 0.5
    deadline = start_at + args.seconds
    workers = [
        _Producer(url, topic, bodies, batch, idempotent, start_at, deadline)
        for _ in range(args.connections)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    errors = [w.error for w in workers if w.error]
    if errors:
        raise RuntimeError(f"{topic}: {errors[0]}")
    records = sum(w.records for w in workers)
    if high_watermark(url, topic) != records:
        raise RuntimeError(f"{topic}: high watermark differs from {records} records acknowledged")
    return records / args.seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args(argv)
    rng = random.Random(7)
    best: dict[tuple[int, bool], float] = {}
    with tempfile.TemporaryDirectory(prefix="lakelog-idem-bench-") as tmp:
        info = machine_info(Path(tmp))
        gateway = start_gateway(Path(tmp) / "data")
        try:
            for round_index in range(args.rounds):
                for batch in BATCH_SIZES:
                    bodies = [encode_body(b) for b in make_batches(batch, rng)]
                    for idempotent in (False, True):
                        topic = f"idem-{batch}-{int(idempotent)}-{round_index}"
                        rate = run_case(gateway.url, topic, batch, idempotent, args, bodies)
                        log(
                            f"round {round_index} batch {batch} idempotent={idempotent}: "
                            f"{rate:,.0f} records/s"
                        )
                        key = (batch, idempotent)
                        best[key] = max(best.get(key, 0.0), rate)
        finally:
            gateway.stop()
    print(
        f"machine: {info['nproc']} CPUs, {info['cpu_model']}, python {info['python']}, "
        f"deltalake {info['packages']['deltalake']}, commit {info['git_commit']}"
    )
    print(f"{args.connections} connections, {args.seconds:g} s per case, best of {args.rounds}\n")
    print("| records/request | idempotence off (records/s) | on (records/s) | on / off |")
    print("|---:|---:|---:|---:|")
    for batch in BATCH_SIZES:
        off, on = best[(batch, False)], best[(batch, True)]
        print(f"| {batch} | {off:,.0f} | {on:,.0f} | {on / off:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
