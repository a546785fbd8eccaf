"""The `lakelog` CLI run as real subprocesses against the session gateway."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

from api.http.app import VERSION
from tests.gateway_process import free_port
from tests.integration.helpers import b64, create_topic, produce

pytestmark = pytest.mark.gateway

CLI_TIMEOUT_S = 60


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def _env(gateway) -> dict[str, str]:
    return {**os.environ, "LAKELOG_BOOTSTRAP_SERVER": gateway.url}


def _start(gateway, args, stdin: bytes | None) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "api.cli", *args],
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(gateway),
    )
    return process


def _finish(process: subprocess.Popen, stdin: bytes | None) -> Result:
    out, err = process.communicate(stdin, timeout=CLI_TIMEOUT_S)
    return Result(process.returncode, out.decode(), err.decode())


def cli(gateway, *args: str, stdin: bytes | None = None) -> Result:
    """Run `python -m api.cli ARGS` with LAKELOG_BOOTSTRAP_SERVER set to the gateway."""
    return _finish(_start(gateway, args, stdin), stdin)


def cli_parallel(gateway, *commands: tuple) -> list[Result]:
    """Run independent CLI commands at once (each is (args, stdin)); results in order."""
    started = [(_start(gateway, args, stdin), stdin) for args, stdin in commands]
    return [_finish(process, stdin) for process, stdin in started]


def _assert_ok(result: Result) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def _assert_one_line_error(result: Result, *fragments: str) -> str:
    """Exit code 1 and exactly one 'lakelog: error: ...' line on stderr, no traceback."""
    assert result.returncode == 1, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("lakelog: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_version(gateway):
    """`lakelog --version` prints the package version and exits 0."""
    result = cli(gateway, "--version")
    assert _assert_ok(result).strip() == f"lakelog {VERSION}"


def test_topics_lifecycle_with_kafka_style_output(gateway, client, topic_name):
    """topics create/list/describe/alter/delete work and print Kafka-tool-like output."""
    created = cli(
        gateway, "topics", "create", "--topic", topic_name, "--partitions", "2",
        "--config", "retention.ms=60000",
    )  # fmt: skip
    assert topic_name in _assert_ok(created)
    listed, described = cli_parallel(
        gateway, (("topics", "list"), None), (("topics", "describe", "--topic", topic_name), None)
    )
    assert topic_name in _assert_ok(listed).splitlines()
    header, *partitions = _assert_ok(described).splitlines()
    assert f"Topic: {topic_name}" in header and "PartitionCount: 2" in header
    assert "retention.ms=60000" in header
    assert len(partitions) == 2
    for number, line in enumerate(partitions):
        assert f"Partition: {number}" in line
        assert "LogStartOffset: 0" in line and "HighWatermark: 0" in line
    altered = cli(
        gateway, "topics", "alter", "--topic", topic_name, "--partitions", "3",
        "--config", "retention.ms=5000",
    )  # fmt: skip
    assert topic_name in _assert_ok(altered)
    topic = client.get(f"/topics/{topic_name}").json()
    assert len(topic["partitions"]) == 3 and topic["configs"]["retention.ms"] == "5000"
    assert topic_name in _assert_ok(cli(gateway, "topics", "delete", "--topic", topic_name))
    assert client.get(f"/topics/{topic_name}").status_code == 404


def test_produce_lines_then_consume_them(gateway, client, topic_name):
    """Lines produced from stdin (keyed and keyless) are consumed back, with keys on request."""
    create_topic(client, topic_name)
    _assert_ok(cli(gateway, "produce", "--topic", topic_name, stdin=b"one\ntwo\r\n\nthree"))
    keyed = b"k1:v1\nk2:v:2\n"
    _assert_ok(cli(gateway, "produce", "--topic", topic_name, "--key-separator", ":", stdin=keyed))
    values, with_keys = cli_parallel(
        gateway,
        (("consume", "--topic", topic_name, "--from-beginning"), None),
        (("consume", "--topic", topic_name, "--from-beginning", "--property", "print.key=true"),
         None),
    )  # fmt: skip
    assert _assert_ok(values).splitlines() == ["one", "two", "", "three", "v1", "v:2"]
    assert _assert_ok(with_keys).splitlines() == [
        "null\tone",
        "null\ttwo",
        "null\t",
        "null\tthree",
        "k1\tv1",
        "k2\tv:2",
    ]
    offsets = client.get(f"/topics/{topic_name}/partitions/0/offsets").json()
    assert offsets["end_offset"] == 6


def test_consume_partition_offset_max_records(gateway, client, topic_name):
    """consume --partition P --offset O --max-records N prints exactly those records."""
    create_topic(client, topic_name, 2)
    records = [{"value": b64(f"line-{i}")} for i in range(10)]
    assert produce(client, topic_name, records, partition=1).status_code == 200
    ranged, offsets, latest = cli_parallel(
        gateway,
        (("consume", "--topic", topic_name, "--partition", "1", "--offset", "3",
          "--max-records", "4"), None),
        (("consume", "--topic", topic_name, "--partition", "1", "--offset", "8",
          "--property", "print.offset=true", "--property", "print.partition=true"), None),
        (("consume", "--topic", topic_name), None),
    )  # fmt: skip
    assert _assert_ok(ranged).splitlines() == ["line-3", "line-4", "line-5", "line-6"]
    assert _assert_ok(offsets).splitlines() == [
        "Partition:1\tOffset:8\tline-8",
        "Partition:1\tOffset:9\tline-9",
    ]
    assert _assert_ok(latest) == ""  # without --from-beginning: only new records


def test_cli_errors_are_one_line_with_exit_code_1(gateway, client, topic_name):
    """Unknown topic, bad configs and bad options exit 1 with one 'lakelog: error:' line."""
    create_topic(client, topic_name)
    missing = f"{topic_name}-missing"
    results = cli_parallel(
        gateway,
        (("produce", "--topic", missing), b"x\n"),
        (("consume", "--topic", missing, "--from-beginning"), None),
        (("topics", "create", "--topic", missing, "--config", "retention.ms"), None),
        (("topics", "create", "--topic", missing, "--config", "retention.ms=abc"), None),
        (("topics", "alter", "--topic", topic_name), None),
        (("consume", "--topic", topic_name, "--offset", "0"), None),
    )
    for unknown_topic in results[:2]:
        _assert_one_line_error(unknown_topic, missing, "40401")
    _assert_one_line_error(results[2], "NAME=VALUE")
    _assert_one_line_error(results[3], "retention.ms")
    _assert_one_line_error(results[4], "nothing to alter")
    _assert_one_line_error(results[5], "--partition")  # as Kafka's console consumer
    assert missing not in client.get("/topics").json()


def test_unreachable_bootstrap_server_mentions_lakelog_serve(gateway):
    """A gateway that is not running gives exit 1 and a hint to run `lakelog serve`."""
    url = f"http://127.0.0.1:{free_port()}"
    result = cli(gateway, "topics", "list", "--bootstrap-server", url)
    _assert_one_line_error(result, "lakelog serve", url)


def test_missing_key_separator_is_reported(gateway, client, topic_name):
    """A line without the key separator is reported in one line and fails the command."""
    create_topic(client, topic_name)
    result = cli(gateway, "produce", "--topic", topic_name, "--key-separator", ":", stdin=b"x\n")
    assert result.returncode != 0
    first = result.stderr.splitlines()[0]
    assert first.startswith("lakelog: error: ") and "separator" in first


def test_missing_key_separator_exits_1_while_stdin_is_open(gateway, client, topic_name):
    """A bad line typed into a still-open stdin makes produce exit 1 cleanly (no abort)."""
    create_topic(client, topic_name)
    process = _start(gateway, ("produce", "--topic", topic_name, "--key-separator", ":"), b"")
    try:
        process.stdin.write(b"no separator here\n")
        process.stdin.flush()
        returncode = process.wait(timeout=CLI_TIMEOUT_S)
        stderr = process.stderr.read().decode()
    finally:
        process.kill()
        process.communicate()
    assert returncode == 1, stderr
    _assert_one_line_error(Result(returncode, "", stderr), "separator")
