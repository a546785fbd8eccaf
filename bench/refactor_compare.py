"""Two checkouts of lakelog side by side, in one run: does a change cost throughput?

A gateway of each checkout (`--baseline DIR`, e.g. a `git worktree` of the commit before a
refactor, and this repository) runs at once, each a `python -m api.cli serve --kafka-port`
child process started from its own checkout (its directory first on PYTHONPATH), on its own
fresh data dir, scheduled maintenance off. Both are warmed up (kafka_compare.warm_up). Then every
round runs each case on both gateways back to back, the order alternating between rounds, so a
trend in the machine's other load (a 2-vCPU VM's throughput swings by 2x within minutes) hits
both sides alike; each round gives one ratio, variant / baseline.

Cases (the same clients and records as the benches they come from):
  kafka-rounds-1000  confluent-kafka, rounds of 1 000 records then flush() (bench/kafka_compare.py)
  kafka-batching     confluent-kafka, continuous produce, client batching (bench/kafka_compare.py)
  http-1000x8        v2 produce of 1 000 records per request on 8 connections
                     (bench/produce_fetch.py's gateway case)

Every run is verified as in those benches (the high watermark equals the records acknowledged).

Usage: .venv/bin/python bench/refactor_compare.py --baseline ../base [--rounds R] [--seconds S]
           [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import kafka_compare, produce_fetch  # noqa: E402
from bench.produce_fetch import machine_info  # noqa: E402
from tests.gateway_process import GatewayProcess, free_port  # noqa: E402

SIDES = ("baseline", "variant")
CASES = ("kafka-rounds-1000", "kafka-batching", "http-1000x8")
HTTP_BATCH = 1_000
HTTP_CONNECTIONS = 8
START_TIMEOUT_S = 60


@dataclass(frozen=True, slots=True)
class Side:
    name: str
    checkout: Path
    gateway: GatewayProcess
    target: kafka_compare.Target


def start_side(name: str, checkout: Path, data_dir: Path) -> Side:
    """`python -m api.cli serve` of `checkout` (its code first on the path)."""
    port, kafka_port = free_port(), free_port()
    data_dir.mkdir(parents=True)
    log_path = data_dir.parent / f"{name}.log"
    command = [sys.executable, "-m", "api.cli", "serve", "--data-dir", str(data_dir)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--kafka-port", str(kafka_port)]
    env = {**os.environ, "PYTHONPATH": str(checkout), "LAKELOG_MAINTENANCE": "false"}
    process = subprocess.Popen(
        command, cwd=checkout, env=env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    address = f"127.0.0.1:{kafka_port}"
    gateway = GatewayProcess(process, url, data_dir, log_path, True, "", address)
    wait_ready(url, process)
    return Side(name, checkout, gateway, kafka_compare.Target(name, address, process.pid))


def wait_ready(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url + "/", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"the gateway at {url} did not start")


def run_case(case: str, side: Side, topic: str, seconds: float, records, bodies) -> float:
    """Records per second of one case on one side (verified by the case itself)."""
    if case == "kafka-rounds-1000":
        result = kafka_compare.bench_rounds(side.target, topic, 1_000, seconds, records)
    elif case == "kafka-batching":
        result = kafka_compare.bench_batching(side.target, topic, seconds, records)
    else:
        result = produce_fetch.bench_gateway(
            side.gateway, topic, HTTP_BATCH, HTTP_CONNECTIONS, seconds, bodies
        )
    if getattr(result, "error", None):
        raise RuntimeError(f"{case} on {side.name}: {result.error}")
    return result.records_per_s


def run_rounds(sides: dict[str, Side], rounds: int, seconds: float) -> list[dict]:
    records = kafka_compare.make_records(1)
    batches = produce_fetch.make_batches(HTTP_BATCH, random.Random(1))
    bodies = [produce_fetch.encode_body(batch) for batch in batches]
    measured = []
    for number in range(rounds):
        order = SIDES if number % 2 == 0 else tuple(reversed(SIDES))
        for case in CASES:
            for name in order:
                topic = f"{case}-{number}"
                rate = run_case(case, sides[name], topic, seconds, records, bodies)
                log(f"round {number + 1}/{rounds} {case} {name}: {rate:,.0f} records/s")
                measured.append({"round": number, "case": case, "side": name, "rate": rate})
    return measured


def summary(measured: list[dict]) -> list[dict]:
    rows = []
    for case in CASES:
        rates = {
            side: [m["rate"] for m in measured if m["case"] == case and m["side"] == side]
            for side in SIDES
        }
        ratios = [v / b for b, v in zip(rates["baseline"], rates["variant"], strict=True)]
        rows.append(
            {
                "case": case,
                "baseline_median": statistics.median(rates["baseline"]),
                "variant_median": statistics.median(rates["variant"]),
                "ratio_median": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "ratios": ratios,
            }
        )
    return rows


def render(rows: list[dict]) -> str:
    lines = [
        "| case | baseline median rec/s | variant median rec/s | variant/baseline: median "
        "of rounds | range | every round |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        every = ", ".join(f"{ratio:.2f}" for ratio in row["ratios"])
        lines.append(
            f"| {row['case']} | {row['baseline_median']:,.0f} | {row['variant_median']:,.0f} | "
            f"**{row['ratio_median']:.3f}** | {row['ratio_min']:.2f}-{row['ratio_max']:.2f} "
            f"| {every} |"
        )
    return "\n".join(lines)


def git_head(checkout: Path) -> str:
    command = ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=6, help="rounds (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=6.0, help="per case and side")
    parser.add_argument("--json", type=Path, help="also write the rounds and summary here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    checkouts = {"baseline": args.baseline.resolve(), "variant": REPO}
    with tempfile.TemporaryDirectory(prefix="lakelog-refactor-") as tmp:
        tmp_root = Path(tmp)
        load_before = os.getloadavg()
        sides = {
            name: start_side(name, checkout, tmp_root / name / "data")
            for name, checkout in checkouts.items()
        }
        try:
            for side in sides.values():
                kafka_compare.warm_up(
                    side.target, kafka_compare.WARMUP_S, kafka_compare.make_records(1)
                )
            measured = run_rounds(sides, args.rounds, args.seconds)
        finally:
            for side in sides.values():
                side.gateway.stop()
        info = machine_info(tmp_root)
    rows = summary(measured)
    heads = {name: git_head(path) for name, path in checkouts.items()}
    print(f"command: {' '.join(sys.argv)}")
    print(f"machine: {info}")
    print(f"code: baseline {heads['baseline']}, variant {heads['variant']} (+ uncommitted)")
    print(f"load average (1, 5, 15 min): before {load_before}, after {os.getloadavg()}")
    print(f"{args.rounds} rounds, {args.seconds:g} s per case and side\n")
    print(render(rows))
    if args.json:
        args.json.write_text(json.dumps({"rounds": measured, "summary": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
