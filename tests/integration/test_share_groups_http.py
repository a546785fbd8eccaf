"""Share groups over HTTP (issue 28): queue consumption with per-record acknowledgement, on a
real gateway process over loopback, state in real Delta tables."""

from __future__ import annotations

import base64
import time
from dataclasses import replace

import httpx
import pytest

from api.http.share_queue import DeliveryId
from tests.conftest import create_topic

SHARE = "/v3/clusters/lakelog/share-groups"


def produce(client: httpx.Client, topic: str, values: list[str], partition: int | None = None):
    records = [
        {"value": v} if partition is None else {"value": v, "partition": partition} for v in values
    ]
    response = client.post(
        f"/topics/{topic}",
        json={"records": records},
        headers={"Content-Type": "application/vnd.kafka.json.v2+json"},
    )
    assert response.status_code == 200, response.text


def set_configs(client: httpx.Client, group: str, **configs) -> None:
    data = [{"name": k.replace("_", "."), "value": str(v)} for k, v in configs.items()]
    response = client.post(f"{SHARE}/{group}/configs:alter", json={"data": data})
    assert response.status_code == 204, response.text


def acquire(client: httpx.Client, group: str, topic: str, **body) -> dict:
    body = {"topics": [topic], "timeout_ms": 0, "format": "json"} | body
    response = client.post(f"{SHARE}/{group}/records:acquire", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def ack(client: httpx.Client, group: str, ids: list[str], kind: str = "accept") -> httpx.Response:
    body = {"acknowledgements": [{"delivery_id": i, "type": kind} for i in ids]}
    return client.post(f"{SHARE}/{group}/records:acknowledge", json=body)


@pytest.fixture
def earliest_group(client, topic_name) -> str:
    group = f"share-{topic_name}"
    set_configs(client, group, share_auto_offset_reset="earliest")
    return group


def test_every_record_is_delivered_once_across_consumers(client, topic_name, earliest_group):
    create_topic(client, topic_name, partitions=2)
    produce(client, topic_name, [f"v{i}" for i in range(20)])
    first = acquire(client, earliest_group, topic_name, max_records=7)
    second = acquire(client, earliest_group, topic_name, max_records=100)
    assert first["member_id"] != second["member_id"]
    values = [r["value"] for r in first["records"] + second["records"]]
    assert sorted(values) == sorted(f"v{i}" for i in range(20))  # none twice, none missing
    assert len(first["records"]) == 7
    assert {r["delivery_count"] for r in first["records"] + second["records"]} == {1}
    third = acquire(client, earliest_group, topic_name)
    assert third["records"] == []  # everything is locked
    ids = [r["delivery_id"] for r in first["records"] + second["records"]]
    answer = ack(client, earliest_group, ids)
    assert answer.status_code == 200, answer.text
    assert all(r["error_code"] is None for r in answer.json()["results"])
    described = client.get(f"{SHARE}/{earliest_group}").json()
    assert {p["partition_id"]: p["records"]["acquired"] for p in described["partitions"]} == {
        0: 0,
        1: 0,
    }
    assert sum(p["start_offset"] for p in described["partitions"]) == 20


def test_a_released_record_comes_back_with_a_higher_delivery_count(
    client, topic_name, earliest_group
):
    create_topic(client, topic_name)
    produce(client, topic_name, ["a", "b"])
    taken = acquire(client, earliest_group, topic_name)["records"]
    assert [r["value"] for r in taken] == ["a", "b"]
    assert ack(client, earliest_group, [taken[0]["delivery_id"]], "release").status_code == 200
    again = acquire(client, earliest_group, topic_name)["records"]
    assert [(r["value"], r["delivery_count"]) for r in again] == [("a", 2)]
    # the earlier delivery of "a" can no longer be acknowledged, the new one can
    stale = ack(client, earliest_group, [taken[0]["delivery_id"]])
    assert stale.status_code == 409 and stale.json()["error_code"] == 40920
    assert ack(client, earliest_group, [again[0]["delivery_id"]]).status_code == 200


def test_an_expired_lock_redelivers_and_the_limit_archives(client, topic_name, earliest_group):
    create_topic(client, topic_name)
    set_configs(client, earliest_group, share_delivery_count_limit=2)
    produce(client, topic_name, ["x"])
    [first] = acquire(client, earliest_group, topic_name, lock_duration_ms=1000)["records"]
    time.sleep(1.1)
    late = ack(client, earliest_group, [first["delivery_id"]])
    assert late.status_code == 409 and "lock on offset 0 expired" in late.json()["message"]
    counts = [[first["delivery_count"]]]
    for _ in range(2):
        records = acquire(client, earliest_group, topic_name, lock_duration_ms=1000)["records"]
        counts.append([r["delivery_count"] for r in records])
        time.sleep(1.1)
    assert counts == [[1], [2], []]  # the second expiry reached the limit: archived
    described = client.get(f"{SHARE}/{earliest_group}").json()
    assert described["partitions"][0]["start_offset"] == 1


def test_bad_acknowledgements_are_refused_and_change_nothing(client, topic_name, earliest_group):
    create_topic(client, topic_name)
    produce(client, topic_name, ["r"])
    [record] = acquire(client, earliest_group, topic_name)["records"]
    delivery_id = record["delivery_id"]

    unknown = ack(client, earliest_group, ["not-a-delivery-id"])
    assert unknown.status_code == 404 and unknown.json()["error_code"] == 40408
    twice = ack(client, earliest_group, [delivery_id, delivery_id])
    assert twice.status_code == 409 and twice.json()["error_code"] == 40920
    forged = replace(DeliveryId.decode(delivery_id), member_id="intruder").encode()
    other = ack(client, earliest_group, [forged])
    assert other.status_code == 409 and "another member" in other.json()["message"]
    empty = ack(client, earliest_group, [])
    assert empty.status_code == 400
    assert acquire(client, earliest_group, topic_name, member_id="other")["records"] == []
    assert ack(client, earliest_group, [delivery_id]).status_code == 200
    again = ack(client, earliest_group, [delivery_id])
    assert again.status_code == 409 and "only an acquired record" in again.json()["message"]
    bad_type = client.post(
        f"{SHARE}/{earliest_group}/records:acknowledge",
        json={"acknowledgements": [{"delivery_id": delivery_id, "type": "maybe"}]},
    )
    assert bad_type.status_code == 400


def test_rejected_records_go_to_the_dead_letter_topic(client, topic_name, earliest_group):
    create_topic(client, topic_name)
    dead = f"{topic_name}-dlq"
    set_configs(
        client,
        earliest_group,
        errors_deadletterqueue_topic_name=dead,
        errors_deadletterqueue_copy_record_enable="true",
    )
    produce(client, topic_name, ["bad"])
    [record] = acquire(client, earliest_group, topic_name)["records"]
    assert ack(client, earliest_group, [record["delivery_id"]], "reject").status_code == 200
    letters = client.get(
        f"/topics/{dead}/partitions/0/records",
        params={"offset": 0},
        headers={"Accept": "application/vnd.kafka.json.v2+json"},
    ).json()
    assert [r["value"] for r in letters] == ["bad"]
    headers = {h["key"]: base64.b64decode(h["value"]).decode() for h in letters[0]["headers"]}
    assert headers["lakelog.dlq.error"] == "rejected"
    assert headers["lakelog.dlq.group"] == earliest_group
    assert headers["lakelog.dlq.source.offset"] == "0"


def test_group_configs_are_checked(client):
    bad = client.post(
        f"{SHARE}/g/configs:alter",
        json={"data": [{"name": "share.record.lock.duration.ms", "value": "5"}]},
    )
    assert bad.status_code == 400 and "between 15000 and 60000" in bad.json()["message"]
    unknown = client.post(
        f"{SHARE}/g/configs:alter", json={"data": [{"name": "share.nope", "value": "1"}]}
    )
    assert unknown.status_code == 400
    listed = client.get(f"{SHARE}/g/configs").json()["data"]
    assert {
        "name": "share.auto.offset.reset",
        "value": "latest",
        "is_default": True,
        "source": "DEFAULT_CONFIG",
    } in listed


def test_latest_is_the_default_start(client, topic_name):
    create_topic(client, topic_name)
    group = f"latest-{topic_name}"
    produce(client, topic_name, ["before"])
    assert acquire(client, group, topic_name)["records"] == []
    produce(client, topic_name, ["after"])
    assert [r["value"] for r in acquire(client, group, topic_name)["records"]] == ["after"]


def test_metrics_show_share_partitions_by_state(client, topic_name, earliest_group):
    create_topic(client, topic_name)
    produce(client, topic_name, ["a", "b", "c"])
    taken = acquire(client, earliest_group, topic_name)["records"]
    assert ack(client, earliest_group, [taken[0]["delivery_id"]], "reject").status_code == 200
    text = client.get("/metrics").text
    labels = f'group="{earliest_group}",partition="0",state="acquired",topic="{topic_name}"'
    assert f"lakelog_share_records{{{labels}}} 2.0" in text
    assert f'lakelog_share_start_offset{{group="{earliest_group}",partition="0"' in text
    rejected = f'lakelog_share_archived_records_total{{group="{earliest_group}",reason="rejected"}}'
    assert f"{rejected} 1.0" in text
    assert f'lakelog_share_acquired_records_total{{group="{earliest_group}"}} 3.0' in text


def test_the_cli_describes_resets_and_deletes_a_share_group(gateway, client, topic_name):
    from tests.integration.test_cli import _assert_ok, _assert_one_line_error, cli

    create_topic(client, topic_name)
    group = f"cli-{topic_name}"
    set_configs(client, group, share_auto_offset_reset="earliest")
    produce(client, topic_name, ["a", "b", "c", "d"])
    taken = acquire(client, group, topic_name, max_records=2)["records"]
    assert ack(client, group, [r["delivery_id"] for r in taken]).status_code == 200
    assert group in _assert_ok(cli(gateway, "share-groups", "list")).split()
    described = _assert_ok(cli(gateway, "share-groups", "describe", "--group", group))
    rows = [line.split() for line in described.splitlines()]
    row = next(r for r in rows if r[:2] == [group, topic_name])
    assert row[1:] == [topic_name, "0", "2", "2", "0", "0", "0", "0"], described
    assert "has no active members" in described
    reset = ("share-groups", "reset", "--group", group, "--topic", topic_name, "--to-earliest")
    assert topic_name in _assert_ok(cli(gateway, *reset))
    again = acquire(client, group, topic_name, max_records=10)["records"]
    assert [r["value"] for r in again] == ["a", "b", "c", "d"]
    unknown = cli(gateway, "share-groups", "reset", "--group", group, "--topic", "nope",
                  "--to-latest")  # fmt: skip
    _assert_one_line_error(unknown, "nope")
    assert _assert_ok(cli(gateway, "share-groups", "delete", "--group", group))
    assert group not in _assert_ok(cli(gateway, "share-groups", "list")).split()
