"""A real Azure Blob endpoint on loopback for tests: Azurite (npm), installed by `make install`
under `.venv/azurite`. It enforces `If-None-Match: *` on Put Blob (put-if-absent)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from email.utils import formatdate
from pathlib import Path

from tests.gateway_process import free_port
from tests.loopback import stop_process, wait_until_answering

REPO = Path(__file__).resolve().parents[1]
AZURITE_MAIN = REPO / ".venv" / "azurite" / "node_modules" / "azurite" / "dist" / "src" / "blob"
STARTUP_TIMEOUT_S = 30.0
# Azurite's well-known development account (published in its documentation).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
_API_VERSION = "2021-08-06"


def azurite_installed() -> bool:
    return (AZURITE_MAIN / "main.js").exists()


@dataclass
class AzuriteServer:
    process: subprocess.Popen
    endpoint: str  # http://127.0.0.1:PORT/devstoreaccount1
    log_path: Path

    @property
    def env(self) -> dict[str, str]:
        """The standard variables a user sets for an Azure account (here Azurite's)."""
        return {
            "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": ACCOUNT_KEY,
            "AZURE_STORAGE_ENDPOINT": self.endpoint,
            "AZURE_ALLOW_HTTP": "true",
        }

    def create_container(self, name: str | None = None) -> str:
        """A new, empty container; its name (a SharedKey-signed Create Container)."""
        name = name or f"lake{uuid.uuid4().hex[:12]}"
        date = formatdate(usegmt=True)
        path = urllib.parse.urlparse(self.endpoint).path.rstrip("/") + "/" + name
        content_type = "application/octet-stream"
        to_sign = (
            "PUT\n\n\n\n\n"
            + f"{content_type}\n"
            + "\n" * 6
            + f"x-ms-date:{date}\nx-ms-version:{_API_VERSION}\n"
            + f"/{ACCOUNT}{path}\nrestype:container"
        )
        digest = hmac.new(base64.b64decode(ACCOUNT_KEY), to_sign.encode(), hashlib.sha256)
        signature = base64.b64encode(digest.digest()).decode()
        request = urllib.request.Request(
            f"{self.endpoint}/{name}?restype=container",
            method="PUT",
            data=b"",
            headers={
                "x-ms-date": date,
                "x-ms-version": _API_VERSION,
                "Authorization": f"SharedKey {ACCOUNT}:{signature}",
                "Content-Type": content_type,
            },
        )
        with urllib.request.urlopen(request, timeout=10):
            pass
        return name

    def stop(self) -> None:
        stop_process(self.process)


def start_azurite(work_dir: Path) -> AzuriteServer:
    """Start Azurite's blob service in memory on a free loopback port; wait until it answers."""
    port = free_port()
    log_path = work_dir / f"azurite-{port}.log"
    process = subprocess.Popen(
        [
            "node",
            str(AZURITE_MAIN / "main.js"),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
        ],
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    server = AzuriteServer(process, f"http://127.0.0.1:{port}/{ACCOUNT}", log_path)
    url = f"http://127.0.0.1:{port}/"
    wait_until_answering(process, url, log_path, what="Azurite", timeout_s=STARTUP_TIMEOUT_S)
    return server
