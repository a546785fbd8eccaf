"""Two gateway servers measured side by side in one run (a baseline and a variant): start each
from a small serving script, run rounds that alternate which side goes first (so a trend in
other load does not favour one), and pair each round's rates into ratios."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.gateway_process import free_port  # noqa: E402

STARTUP_TIMEOUT_S = 60


@dataclass(frozen=True)
class Round:
    kind: str
    requests_per_s: float


def start_server(script: str, kind: str, data_dir: Path) -> tuple[subprocess.Popen, str]:
    """Run `python -c script kind port data_dir`; returns the process and its URL once
    `GET /` answers."""
    port = free_port()
    command = [sys.executable, "-c", script, kind, str(port), str(data_dir)]
    process = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{kind} server did not start")


def run_rounds(
    kinds: tuple[str, str], rounds: int, measure: Callable[[str], Coroutine[None, None, float]]
) -> list[Round]:
    """`rounds` rounds of `measure(kind)` (requests/s) for both kinds, the first kind first in
    even rounds; progress on stderr."""
    measured = []
    for number in range(rounds):
        for kind in kinds if number % 2 == 0 else tuple(reversed(kinds)):
            rate = asyncio.run(measure(kind))
            print(f"round {number + 1}/{rounds} {kind}: {rate:,.0f} req/s", file=sys.stderr)
            measured.append(Round(kind, rate))
    return measured


def best_rates(rounds: list[Round], kinds: tuple[str, str]) -> dict[str, float]:
    return {kind: max(r.requests_per_s for r in rounds if r.kind == kind) for kind in kinds}


def rate_rows(rounds: list[Round], kinds: tuple[str, str], first_column: str) -> list[str]:
    """A markdown table: each kind's best rate and every round's."""
    best = best_rates(rounds, kinds)
    lines = [f"| {first_column} | best req/s | every round |", "|---|---|---|"]
    for kind in kinds:
        every = ", ".join(f"{r.requests_per_s:,.0f}" for r in rounds if r.kind == kind)
        lines.append(f"| {kind} | {best[kind]:,.0f} | {every} |")
    return lines


def ratio_line(rounds: list[Round], baseline: str, variant: str) -> str:
    """variant / baseline of the best rounds and of each round (adjacent runs)."""
    best = best_rates(rounds, (baseline, variant))
    paired = []
    for first, second in zip(rounds[::2], rounds[1::2], strict=True):
        rate = {first.kind: first.requests_per_s, second.kind: second.requests_per_s}
        paired.append(rate[variant] / rate[baseline])
    paired.sort()
    return (
        f"ratio {variant} / {baseline}: best rounds {best[variant] / best[baseline]:.3f}; per "
        f"round (same round, adjacent runs) median {statistics.median(paired):.3f}, "
        f"range {paired[0]:.3f}-{paired[-1]:.3f}"
    )
