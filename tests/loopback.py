"""Helpers for the real servers tests start on loopback (S3, Azure Blob emulators)."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


def wait_until_answering(
    process: subprocess.Popen, url: str, log_path: Path, *, what: str, timeout_s: float
) -> None:
    """Poll `url` until the server answers at all (any HTTP status counts as up).

    Raises:
        RuntimeError: it exited, or did not answer within `timeout_s` (then it is stopped).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited:\n{log_path.read_text(errors='replace')}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except urllib.error.HTTPError:
            return  # an error status is an answer
        except OSError:
            time.sleep(0.1)
    stop_process(process)
    raise RuntimeError(f"{what} did not answer within {timeout_s}s")


def stop_process(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
