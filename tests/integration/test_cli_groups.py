"""`lakelog groups` (list, describe, reset-offsets) run as real subprocesses against the session
gateway, checked against the offsets the gateway reports over HTTP."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import httpx
import pytest

from tests.integration.helpers import b64, create_topic, produce
from tests.integration.test_cli import _assert_ok, _assert_one_line_error, cli

pytestmark = pytest.mark.gateway

V2 = "application/vnd.kafka.v2+json"
NO_EXECUTE_WARNING = "WARN: No action will be performed as the --execute option is missing"


def produce_values(client: httpx.Client, topic: str, partition: int, count: int) -> None:
    records = [{"value": b64(f"v{i}")} for i in range(count)]
    assert produce(client, topic, records, partition=partition).status_code == 200


def commit(client: httpx.Client, group: str, topic: str, offsets: dict[int, int]) -> None:
    """An admin commit through the native group API (next offset to read, no member)."""
    body = {"offsets": [{"topic": topic, "partition": p, "offset": o} for p, o in offsets.items()]}
    response = client.post(f"/groups/{group}/offsets", json=body)
    assert response.status_code == 204, response.text


def committed(client: httpx.Client, group: str) -> dict[int, int]:
    offsets = client.get(f"/groups/{group}/offsets").json()["offsets"]
    return {o["partition"]: o["offset"] for o in offsets}


def subscribed_instance(client: httpx.Client, group: str, topic: str) -> str:
    body = {"name": "c1", "format": "binary", "auto.commit.enable": "false"}
    response = client.post(f"/consumers/{group}", json=body, headers={"Content-Type": V2})
    assert response.status_code == 200, response.text
    consumer = f"/consumers/{group}/instances/c1"
    assert client.post(f"{consumer}/subscription", json={"topics": [topic]}).status_code == 204
    return consumer


def table(stdout: str) -> list[list[str]]:
    """The rows of the last table printed (after its header), split into cells."""
    lines = [line.split() for line in stdout.splitlines() if line.strip()]
    header = max(i for i, cells in enumerate(lines) if cells[0] == "GROUP")
    return lines[header + 1 :]


def reset(gateway, group: str, *args: str):
    return cli(gateway, "groups", "reset-offsets", "--group", group, *args)


@pytest.fixture
def idle_group(client, topic_name) -> tuple[str, str]:
    """Partition 0 has 10 records, partition 1 has 3; committed 5 and 1; no members."""
    create_topic(client, topic_name, partitions=2)
    produce_values(client, topic_name, 0, 10)
    produce_values(client, topic_name, 1, 3)
    group = f"g-{topic_name}"
    commit(client, group, topic_name, {0: 5, 1: 1})
    return group, topic_name


def test_list_and_describe_show_state_offsets_and_lag(gateway, client, topic_name):
    """After 10 records and a v2 commit of 4, describe prints Kafka's columns; a partition the
    member owns without a committed offset shows '-' for the offset and lag."""
    create_topic(client, topic_name, partitions=2)
    produce_values(client, topic_name, 0, 10)
    group = f"g-{topic_name}"
    consumer = subscribed_instance(client, group, topic_name)
    body = {"offsets": [{"topic": topic_name, "partition": 0, "offset": 3}]}  # v2: last consumed
    assert client.post(f"{consumer}/offsets", json=body).status_code == 200
    member = client.get(f"/groups/{group}").json()["members"][0]["member_id"]

    assert group in _assert_ok(cli(gateway, "groups", "list")).splitlines()
    described = _assert_ok(cli(gateway, "groups", "describe", "--group", group))
    state_header, state = (line.split() for line in described.splitlines()[:2])
    assert state_header == ["GROUP", "COORDINATOR-ID", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    assert state == [group, "0", "range", "Stable", "1"]
    assert "CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID" in described
    assert table(described) == [
        [group, topic_name, "0", "4", "10", "6", member, "rest-c1"],
        [group, topic_name, "1", "-", "0", "-", member, "rest-c1"],
    ]

    client.delete(consumer)
    described = _assert_ok(cli(gateway, "groups", "describe", "--group", group))
    assert f"Consumer group '{group}' has no active members." in described
    assert table(described) == [[group, topic_name, "0", "4", "10", "6", "-", "-"]]


def test_describe_unknown_group_fails_with_40405(gateway, topic_name):
    result = cli(gateway, "groups", "describe", "--group", f"nobody-{topic_name}")
    _assert_one_line_error(result, "does not exist", "40405")


def test_reset_without_execute_only_prints_the_plan(gateway, client, idle_group):
    """Without --execute (with or without --dry-run) the plan is printed and nothing changes;
    without either flag Kafka's warning is printed too."""
    group, topic = idle_group
    plain = reset(gateway, group, "--topic", topic, "--to-earliest")
    dry = reset(gateway, group, "--topic", topic, "--to-earliest", "--dry-run")
    assert table(_assert_ok(plain)) == [[group, topic, "0", "0"], [group, topic, "1", "0"]]
    assert NO_EXECUTE_WARNING in plain.stderr
    assert table(_assert_ok(dry)) == table(plain.stdout)
    assert NO_EXECUTE_WARNING not in dry.stderr
    assert committed(client, group) == {0: 5, 1: 1}


def test_reset_execute_to_earliest_offset_shift_and_latest(gateway, client, idle_group):
    """--execute commits each kind of target, clamped to [log start, high watermark]."""
    group, topic = idle_group
    _assert_ok(reset(gateway, group, "--topic", topic, "--to-earliest", "--execute"))
    assert committed(client, group) == {0: 0, 1: 0}
    _assert_ok(reset(gateway, group, "--topic", f"{topic}:0", "--to-offset", "7", "--execute"))
    assert committed(client, group) == {0: 7, 1: 0}
    shifted = reset(gateway, group, "--topic", f"{topic}:0,1", "--shift-by", "-2", "--execute")
    assert table(_assert_ok(shifted)) == [[group, topic, "0", "5"], [group, topic, "1", "0"]]
    assert "lower than the earliest offset" in shifted.stderr  # partition 1: 0 - 2, clamped
    assert committed(client, group) == {0: 5, 1: 0}
    beyond = reset(gateway, group, "--topic", f"{topic}:1", "--to-offset", "99", "--execute")
    _assert_ok(beyond)
    assert "Value will be set to 3" in beyond.stderr
    assert committed(client, group) == {0: 5, 1: 3}
    _assert_ok(reset(gateway, group, "--all-topics", "--to-latest", "--execute"))
    assert committed(client, group) == {0: 10, 1: 3}


def test_reset_execute_to_datetime(gateway, client, topic_name):
    """--to-datetime picks the first record at or after the time; after the last record it
    picks the high watermark (Kafka's behaviour)."""
    create_topic(client, topic_name)
    produce_values(client, topic_name, 0, 4)
    time.sleep(0.05)
    between = datetime.now(UTC)
    time.sleep(0.05)
    produce_values(client, topic_name, 0, 3)
    group = f"g-{topic_name}"
    iso = between.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    _assert_ok(reset(gateway, group, "--topic", topic_name, "--to-datetime", iso, "--execute"))
    assert committed(client, group) == {0: 4}
    later = "2999-01-01T00:00:00.000+02:00"
    _assert_ok(reset(gateway, group, "--topic", topic_name, "--to-datetime", later, "--execute"))
    assert committed(client, group) == {0: 7}
    early = "2000-01-01T00:00:00"
    _assert_ok(reset(gateway, group, "--topic", topic_name, "--to-datetime", early, "--execute"))
    assert committed(client, group) == {0: 0}


def test_reset_is_refused_while_a_member_is_active(gateway, client, topic_name):
    """As Kafka's tool: exit 1 and nothing committed while the group has a member (even for a
    dry run); once the member leaves the reset goes through."""
    create_topic(client, topic_name)
    produce_values(client, topic_name, 0, 6)
    group = f"g-{topic_name}"
    consumer = subscribed_instance(client, group, topic_name)
    body = {"offsets": [{"topic": topic_name, "partition": 0, "offset": 3}]}
    assert client.post(f"{consumer}/offsets", json=body).status_code == 200
    for mode in ("--execute", "--dry-run"):
        refused = reset(gateway, group, "--topic", topic_name, "--to-earliest", mode)
        _assert_one_line_error(refused, "inactive", "Stable", "1 active member")
        assert refused.stdout == ""
    assert committed(client, group) == {0: 4}
    assert client.delete(consumer).status_code == 204
    _assert_ok(reset(gateway, group, "--topic", topic_name, "--to-earliest", "--execute"))
    assert committed(client, group) == {0: 0}


def test_reset_errors_are_one_line(gateway, client, topic_name):
    """Bad inputs exit 1 with one line; a missing target is a usage error (exit 2)."""
    create_topic(client, topic_name)
    group = f"g-{topic_name}"
    _assert_one_line_error(
        reset(gateway, group, "--topic", topic_name, "--shift-by", "1", "--dry-run"),
        "no committed offset",
    )
    _assert_one_line_error(
        reset(gateway, group, "--topic", f"{topic_name}-missing", "--to-earliest"), "40401"
    )
    _assert_one_line_error(
        reset(gateway, group, "--topic", f"{topic_name}:3", "--to-earliest"), "no partition 3"
    )
    _assert_one_line_error(
        reset(gateway, group, "--topic", topic_name, "--to-datetime", "yesterday"), "ISO-8601"
    )
    _assert_one_line_error(reset(gateway, group, "--all-topics", "--to-latest"), "--topic")
    usage = reset(gateway, group, "--topic", topic_name, "--execute")
    assert usage.returncode == 2 and "--to-earliest" in usage.stderr
    assert committed(client, group) == {}


def test_delete_removes_an_idle_group_and_its_offsets(gateway, client, idle_group):
    group, _ = idle_group
    deleted = cli(gateway, "groups", "delete", "--group", group)
    _assert_ok(deleted)
    assert f"('{group}') was successful" in deleted.stdout
    assert committed(client, group) == {}
    again = cli(gateway, "groups", "delete", "--group", group)
    _assert_one_line_error(again, "does not exist")
