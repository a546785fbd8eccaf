"""A real S3 endpoint on loopback for tests and benches: moto's server (`moto[server]`), which
enforces conditional PUTs (`If-None-Match: *` answers 412 when the object exists)."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.gateway_process import free_port
from tests.loopback import stop_process, wait_until_answering

STARTUP_TIMEOUT_S = 30.0
REGION = "us-east-1"


@dataclass
class S3Server:
    """A moto server process and the standard AWS variables that reach it."""

    process: subprocess.Popen
    endpoint: str
    log_path: Path

    @property
    def env(self) -> dict[str, str]:
        """Exactly what a user sets for a plain-http S3-compatible endpoint."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "lakelog-test",
            "AWS_SECRET_ACCESS_KEY": "lakelog-test-secret",
            "AWS_ALLOW_HTTP": "true",
        }

    def create_bucket(self, name: str | None = None) -> str:
        """A new, empty bucket; its name."""
        name = name or f"lake-{uuid.uuid4().hex[:12]}"
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
        return name

    def stop(self) -> None:
        stop_process(self.process)


def start_s3_server(work_dir: Path) -> S3Server:
    """Start `moto_server` on a free loopback port and wait until it answers."""
    port = free_port()
    log_path = work_dir / f"moto-{port}.log"
    binary = Path(sys.executable).with_name("moto_server")
    process = subprocess.Popen(
        [str(binary), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"},
    )
    server = S3Server(process, f"http://127.0.0.1:{port}", log_path)
    wait_until_answering(
        process, server.endpoint + "/", log_path, what="moto_server", timeout_s=STARTUP_TIMEOUT_S
    )
    return server
