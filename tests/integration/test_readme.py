"""The README is the front door (issue: operations, item 6): its command blocks run as written,
in order, against a real gateway, as a new user would run them after `make run`.

Every ```bash block carries an HTML comment right above it: `<!-- readme-test: run -->`, or
`run expect-errors=CODE,...` (a block that shows a refusal on purpose), or `skip: why`. A block
without one fails this test, so a new block cannot go untested by accident. Blocks run with
bash (`set -eo pipefail`) in a fresh directory that links the repository's `.venv`; each must
exit 0, and no answer may carry a Confluent `error_code` other than the expected ones.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.loopback import wait_until_answering

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
QUICKSTART_PORT = 8082  # the README's gateway (make run's default)
KAFKA_PORT = 9092  # its Kafka listener (make run's default)
BLOCK_TIMEOUT_S = 240
_NOTE = re.compile(r"<!-- readme-test: (run|skip)(?::? ?(.*?))? -->")
_ERROR_CODE = re.compile(r'"error_code"\s*:\s*(\d+)')


@dataclass(frozen=True)
class Block:
    line: int
    action: str  # run | skip
    detail: str
    script: str

    @property
    def expected_errors(self) -> set[int]:
        match = re.search(r"expect-errors=([\d,]+)", self.detail)
        return {int(code) for code in match[1].split(",")} if match else set()


def readme_blocks() -> list[Block]:
    lines = README.read_text().split("\n")
    blocks, index = [], 0
    while index < len(lines):
        if lines[index].startswith("```bash"):
            note = _NOTE.fullmatch(lines[index - 1].strip()) if index else None
            end = lines.index("```", index + 1)
            action, detail = (note[1], note[2] or "") if note else ("missing", "")
            blocks.append(Block(index + 1, action, detail, "\n".join(lines[index + 1 : end])))
            index = end
        index += 1
    return blocks


def test_every_block_says_whether_it_runs():
    missing = [b.line for b in readme_blocks() if b.action not in ("run", "skip")]
    assert not missing, f"README bash blocks without a readme-test note, at lines {missing}"
    assert all(b.detail for b in readme_blocks() if b.action == "skip")  # say why


@pytest.fixture
def workdir(tmp_path) -> Path:
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    return tmp_path


def _tcp_port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _port_free(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/", timeout=0.5)
    except httpx.HTTPError:
        return True
    return False


@pytest.mark.timeout(1200)
def test_the_readme_runs_as_written(workdir):
    if not _port_free(QUICKSTART_PORT):
        pytest.fail(f"port {QUICKSTART_PORT} (the README's gateway) is taken on this machine")
    if not _tcp_port_free(KAFKA_PORT):
        pytest.fail(f"port {KAFKA_PORT} (the README's Kafka listener) is taken on this machine")
    log_path = workdir / "gateway.log"
    # What `make run` serves once installed (HTTP on 8082, Kafka's protocol on 9092).
    gateway = subprocess.Popen(
        [
            str(REPO / ".venv/bin/lakelog"),
            "serve",
            "--data-dir",
            "./data",
            "--kafka-port",
            str(KAFKA_PORT),
        ],
        cwd=workdir,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        env=_env(),
    )
    try:
        url = f"http://127.0.0.1:{QUICKSTART_PORT}"
        wait_until_answering(gateway, url + "/", log_path, what="lakelog serve", timeout_s=60)
        for block in readme_blocks():
            if block.action == "run":
                _run(block, workdir)
    finally:
        gateway.send_signal(signal.SIGTERM)
        try:
            gateway.wait(20)
        except subprocess.TimeoutExpired:
            gateway.kill()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKELOG_", "AWS_"))}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


def _run(block: Block, workdir: Path) -> None:
    # Output to a file, not a pipe: servers a block starts in the background (`&`) keep its
    # stdout open after bash exits. A process group of its own, stopped afterwards, so that
    # those servers do not outlive their block.
    output_path = workdir / f"block-{block.line}.out"
    with output_path.open("wb") as output:
        process = subprocess.Popen(
            ["bash", "-eo", "pipefail", "-c", block.script],
            cwd=workdir,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=_env(),
            start_new_session=True,
        )
        try:
            process.wait(timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        finally:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    text = output_path.read_text(errors="replace")
    where = f"README block at line {block.line}"
    assert process.returncode == 0, f"{where} exited {process.returncode}:\n{text}"
    codes = {int(code) for code in _ERROR_CODE.findall(text)}
    assert codes <= block.expected_errors, f"{where} answered errors {codes}:\n{text}"
    assert block.expected_errors <= codes, f"{where} should show {block.expected_errors}:\n{text}"
