"""The cost of observability on the produce path: request ids, per-route metrics and the
structured request context (api/http/request_middleware.py), against the same gateway without
that middleware, in one run; and the cost of a `/metrics` scrape against `GET /`.

Two gateway processes (uvicorn, separate data directories) serve the same app: `bare` (the
RequestMiddleware removed before the app starts) and `observed` (as `lakelog serve` runs it).
A single-loop client (bench/raw_http.py) keeps N connections busy for S seconds with either
`produce` (small batches: R records of 100 bytes per request, binary v2, over 4 partitions) or
`offsets` (`GET .../partitions/{p}/offsets`, a cheap read, so per-request costs show most). Rounds
alternate which side goes first; the table shows each side's best round and the ratio
observed / bare, of the best rounds and as the median of the per-round ratios.

Usage: .venv/bin/python bench/observability.py [--workload produce|offsets] [--seconds S]
           [--rounds N] [--connections C] [--records R]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.paired_servers import (  # noqa: E402
    Round,
    rate_rows,
    ratio_line,
    run_rounds,
    start_server,
)
from bench.produce_fetch import machine_info, report_header  # noqa: E402
from bench.raw_http import RawConnection  # noqa: E402

KINDS = ("bare", "observed")
PARTITIONS = 4
SCRAPES = 30
SERVE = """
import sys, uvicorn
from api.node import node_app
from api.http.request_middleware import RequestMiddleware
from conf.settings import load_settings
kind, port, data_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
app = node_app(load_settings(data_dir=data_dir, port=port, maintenance=False))
if kind == "bare":  # the middleware stack is built at the first request: remove it before
    app.user_middleware = [m for m in app.user_middleware if m.cls is not RequestMiddleware]
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
"""


def start_gateway(kind: str, data_dir: Path) -> tuple[subprocess.Popen, str]:
    """A server with the `bench` topic."""
    process, url = start_server(SERVE, kind, data_dir)
    topic = {"topic_name": "bench", "partitions_count": PARTITIONS}
    created = httpx.post(f"{url}/v3/clusters/lakelog/topics", json=topic, timeout=30)
    assert created.status_code == 201, created.text
    return process, url


def produce_body(records: int) -> bytes:
    value = base64.b64encode(b"x" * 100).decode()
    return json.dumps({"records": [{"value": value} for _ in range(records)]}).encode()


async def measure(url: str, *, seconds: float, connections: int, body: bytes | None) -> float:
    """Requests per second of N connections sending back to back for `seconds`: produce
    `body`, or (None) ask for the partition's offsets."""
    links = [await RawConnection.open(url) for _ in range(connections)]
    headers = {"Content-Type": "application/vnd.kafka.binary.v2+json"}
    done = 0
    stop_at = time.monotonic() + seconds

    async def loop(index: int, link: RawConnection) -> None:
        nonlocal done
        target = f"/topics/bench/partitions/{index % PARTITIONS}"
        while time.monotonic() < stop_at:
            if body is None:
                response = await link.request("GET", target + "/offsets")
            else:
                response = await link.request("POST", target, body, headers)
            assert response.status == 200, response.body[:200]
            done += 1

    started = time.monotonic()
    await asyncio.gather(*(loop(i, link) for i, link in enumerate(links)))
    elapsed = time.monotonic() - started
    for link in links:
        await link.close()
    return done / elapsed


def scrape_ms(url: str) -> tuple[float, float, int]:
    """Median latency of GET /metrics and of GET / (ms), and the metrics' size in bytes."""
    with httpx.Client(base_url=url, timeout=30) as client:
        metrics_ms, health_ms, size = [], [], 0
        for _ in range(SCRAPES):
            started = time.perf_counter()
            size = len(client.get("/metrics").content)
            metrics_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            client.get("/")
            health_ms.append((time.perf_counter() - started) * 1000)
    return statistics.median(metrics_ms), statistics.median(health_ms), size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("produce", "offsets"), default="produce")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--records", type=int, default=10)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-observability-") as tmp:
        servers = {kind: start_gateway(kind, Path(tmp) / kind) for kind in KINDS}
        try:
            body = produce_body(args.records) if args.workload == "produce" else None
            rounds = run_rounds(
                KINDS,
                args.rounds,
                lambda kind: measure(
                    servers[kind][1], seconds=args.seconds, connections=args.connections, body=body
                ),
            )
            scrape = scrape_ms(servers["observed"][1])
        finally:
            for process, _ in servers.values():
                process.terminate()
                process.wait(15)
        machine = machine_info(Path(tmp))
    print_report(rounds, scrape, args, machine, load_before)
    return 0


def print_report(rounds: list[Round], scrape, args, machine: dict, load_before) -> None:
    lines = report_header(
        machine,
        command=shlex.join([sys.executable, *sys.argv]),
        code_details=(
            f"v2 produce of {args.records} x 100 B records per request"
            if args.workload == "produce"
            else "GET /topics/bench/partitions/{p}/offsets"
        )
        + f", {args.connections} connections, {PARTITIONS} partitions",
        load_before=tuple(round(x, 2) for x in load_before),
        load_after=tuple(round(x, 2) for x in os.getloadavg()),
    )
    metrics_ms, health_ms, size = scrape
    lines += [
        "",
        *rate_rows(rounds, KINDS, "gateway"),
        "",
        ratio_line(rounds, *KINDS),
        f"GET /metrics after the rounds: median {metrics_ms:.2f} ms for {size:,} bytes; "
        f"GET / median {health_ms:.2f} ms (ratio {metrics_ms / health_ms:.1f})",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
