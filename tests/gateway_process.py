"""Starts real gateway processes (`lakelog serve`) on loopback for end-to-end tests and benches."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

STARTUP_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class GatewayProcess:
    """A `lakelog serve` child process and where to reach it."""

    process: subprocess.Popen
    url: str
    data_dir: Path
    log_path: Path
    verify: ssl.SSLContext | bool = True  # how to check its certificate, with TLS on
    root: str = ""  # its storage root: data_dir, or the object-store URI it was given
    kafka_address: str | None = None  # "127.0.0.1:PORT" of its Kafka listener, if started

    def __post_init__(self) -> None:
        self.root = self.root or str(self.data_dir)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_gateway(
    data_dir: Path,
    *,
    env: dict[str, str] | None = None,
    verify: ssl.SSLContext | bool = True,
    root: str | None = None,
    kafka: bool = False,
) -> GatewayProcess:
    """Run `python -m api.cli serve` with `env` overrides (LAKELOG_*); wait until it answers
    (over HTTPS, checked with `verify`, when `env` sets LAKELOG_TLS_CERT_FILE). `root` (an
    object-store URI) replaces `data_dir` as the storage root; its log still goes beside
    `data_dir`. `kafka`: serve the Kafka protocol too, on another free port."""
    port = free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir.parent / f"gateway-{port}.log"
    command = [
        sys.executable,
        "-m",
        "api.cli",
        "serve",
        "--data-dir",
        root or str(data_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    kafka_address = None
    if kafka:
        kafka_port = free_port()
        command += ["--kafka-port", str(kafka_port)]
        kafka_address = f"127.0.0.1:{kafka_port}"
    process = subprocess.Popen(
        command,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        # Scheduled maintenance off unless a test asks for it: a retention run at an
        # arbitrary moment would move the log start under tests that check it themselves.
        env={**os.environ, "LAKELOG_MAINTENANCE": "false", **(env or {})},
    )
    scheme = "https" if "LAKELOG_TLS_CERT_FILE" in (env or {}) else "http"
    url = f"{scheme}://127.0.0.1:{port}"
    gateway = GatewayProcess(process, url, data_dir, log_path, verify, root or "", kafka_address)
    _wait_ready(gateway)
    return gateway


def _wait_ready(gateway: GatewayProcess) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if gateway.process.poll() is not None:
            raise RuntimeError(f"gateway exited early:\n{gateway.log_text()}")
        try:
            if httpx.get(gateway.url + "/", timeout=1.0, verify=gateway.verify).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    gateway.stop()
    raise RuntimeError(f"gateway did not answer within {STARTUP_TIMEOUT_S}s:\n{gateway.log_text()}")
