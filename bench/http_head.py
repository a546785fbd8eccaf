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
import sys
import tempfile
import time
from pathlib import Path

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

KINDS = ("stock", "limited")  # baseline, variant
SERVE = """
import sys, uvicorn
from api.node import node_app
from api.http.http_protocol import HeadLimits, head_limited_protocol
from conf.settings import load_settings
kind, port, data_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
settings = load_settings(data_dir=data_dir, port=port)
http = "httptools" if kind == "stock" else head_limited_protocol(
    HeadLimits(settings.request_head_bytes_max, settings.request_headers_max,
               settings.request_head_timeout_ms))
uvicorn.run(node_app(settings), host="127.0.0.1", port=port, log_level="warning", http=http)
"""


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
        servers = {kind: start_server(SERVE, kind, Path(tmp) / "data") for kind in KINDS}
        try:
            rounds = run_rounds(
                KINDS,
                args.rounds,
                lambda kind: measure(
                    servers[kind][1],
                    seconds=args.seconds,
                    connections=args.connections,
                    headers=headers,
                ),
            )
        finally:
            for process, _ in servers.values():
                process.terminate()
                process.wait(15)
        machine = machine_info(Path(tmp))
    print_report(rounds, args, machine, load_before)
    return 0


def print_report(rounds: list[Round], args, machine: dict, load_before) -> None:
    lines = report_header(
        machine,
        command=shlex.join([sys.executable, *sys.argv]),
        code_details=f"GET / with {args.headers} extra headers, {args.connections} connections",
        load_before=tuple(round(x, 2) for x in load_before),
        load_after=tuple(round(x, 2) for x in os.getloadavg()),
    )
    lines += ["", *rate_rows(rounds, KINDS, "protocol"), "", ratio_line(rounds, *KINDS)]
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
