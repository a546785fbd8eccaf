"""The cost of the request-head limits (api/http/http_protocol.py) against uvicorn's own httptools
protocol, in one run.

Two `uvicorn` child processes serve the same lakelog app on one data directory: `stock`
(http="httptools", what `lakelog serve` ran before) and `limited` (the head-limited subclass
`lakelog serve` runs now). A single-loop client (bench/raw_http.py) keeps N connections busy with
`GET /` (the health check: the cheapest route, so protocol costs show most) carrying H extra
headers. Each round runs stock and limited back to back (alternating which goes first), so a burst
of other load hits both alike; the table shows each side's best round, and the ratio limited /
stock both of the best rounds and as the median of the per-round ratios.

Usage: .venv/bin/python bench/http_head.py [--seconds S] [--rounds R] [--connections N]
           [--headers H]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.produce_fetch import machine_info, report_header  # noqa: E402
from bench.raw_http import RawConnection  # noqa: E402
from tests.gateway_process import free_port  # noqa: E402

SERVE = """
import sys, uvicorn
from api.http.app import create_app
from api.http.http_protocol import HeadLimits, head_limited_protocol
from conf.settings import load_settings
kind, port, data_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
settings = load_settings(data_dir=data_dir, port=port)
http = "httptools" if kind == "stock" else head_limited_protocol(
    HeadLimits(settings.request_head_bytes_max, settings.request_headers_max,
               settings.request_head_timeout_ms))
uvicorn.run(create_app(settings), host="127.0.0.1", port=port, log_level="warning", http=http)
"""


@dataclass(frozen=True)
class Round:
    kind: str
    requests_per_s: float


def start_server(kind: str, data_dir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [sys.executable, "-c", SERVE, kind, str(port), str(data_dir)]
    process = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{kind} server did not start")


async def measure(url: str, *, seconds: float, connections: int, headers: dict) -> float:
    """Requests per second of N connections sending GET / back to back for `seconds`."""
    links = [await RawConnection.open(url) for _ in range(connections)]
    done = 0
    stop_at = time.monotonic() + seconds

    async def loop(link: RawConnection) -> None:
        nonlocal done
        while time.monotonic() < stop_at:
            response = await link.request("GET", "/", headers=headers)
            assert response.status == 200, response.body[:200]
            done += 1

    started = time.monotonic()
    await asyncio.gather(*(loop(link) for link in links))
    elapsed = time.monotonic() - started
    for link in links:
        await link.close()
    return done / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--headers", type=int, default=20)
    args = parser.parse_args()
    headers = {f"X-Bench-{i}": "v" * 32 for i in range(args.headers)}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-head-") as tmp:
        servers = {kind: start_server(kind, Path(tmp) / "data") for kind in ("stock", "limited")}
        try:
            rounds = run_rounds(servers, args, headers)
        finally:
            for process, _ in servers.values():
                process.terminate()
                process.wait(15)
        machine = machine_info(Path(tmp))
    print_report(rounds, args, machine, load_before)
    return 0


def run_rounds(servers, args, headers) -> list[Round]:
    rounds = []
    for number in range(args.rounds):
        # Alternate which side goes first, so a trend in other load does not favour one.
        for kind in ("stock", "limited") if number % 2 == 0 else ("limited", "stock"):
            rate = asyncio.run(
                measure(
                    servers[kind][1],
                    seconds=args.seconds,
                    connections=args.connections,
                    headers=headers,
                )
            )
            print(f"round {number + 1}/{args.rounds} {kind}: {rate:,.0f} req/s", file=sys.stderr)
            rounds.append(Round(kind, rate))
    return rounds


def print_report(rounds: list[Round], args, machine: dict, load_before) -> None:
    best = {
        kind: max(r.requests_per_s for r in rounds if r.kind == kind)
        for kind in ("stock", "limited")
    }
    lines = report_header(
        machine,
        command=shlex.join([sys.executable, *sys.argv]),
        code_details=f"GET / with {args.headers} extra headers, {args.connections} connections",
        load_before=tuple(round(x, 2) for x in load_before),
        load_after=tuple(round(x, 2) for x in os.getloadavg()),
    )
    lines += [
        "",
        "| protocol | best req/s | every round |",
        "|---|---|---|",
    ]
    for kind in ("stock", "limited"):
        every = ", ".join(f"{r.requests_per_s:,.0f}" for r in rounds if r.kind == kind)
        lines.append(f"| {kind} | {best[kind]:,.0f} | {every} |")
    paired = sorted(_round_ratios(rounds))
    lines.append(
        f"\nratio limited / stock: best rounds {best['limited'] / best['stock']:.3f}; per round "
        f"(same round, adjacent runs) median {statistics.median(paired):.3f}, "
        f"range {paired[0]:.3f}-{paired[-1]:.3f}"
    )
    print("\n".join(lines))


def _round_ratios(rounds: list[Round]) -> list[float]:
    """limited / stock of each round (runs are recorded in pairs, one round after another)."""
    ratios = []
    for first, second in zip(rounds[::2], rounds[1::2], strict=True):
        rate = {first.kind: first.requests_per_s, second.kind: second.requests_per_s}
        ratios.append(rate["limited"] / rate["stock"])
    return ratios


if __name__ == "__main__":
    sys.exit(main())
