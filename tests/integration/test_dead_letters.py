"""Dead letter topics against a real gateway: one call copies a record a consumer gave up on to
`<topic>.dlq` with headers naming its source and failure, and commits the source offset past it
(native group API and REST v2 instances); `lakelog dlq list|replay` read and send them back."""

from __future__ import annotations

import time

import httpx
import pytest

from jobs.runner import JobRequest, run_job
from tests.integration.helpers import assert_error, b64, create_topic, fetch, produce, unb64
from tests.integration.test_cli import cli
from tests.integration.test_compaction_visibility import CATCH_UP_S
from tests.integration.test_consumers_v2 import new_consumer, records, subscribe
from tests.integration.test_groups_native import join

pytestmark = pytest.mark.gateway


def produce_keyed(client: httpx.Client, topic: str, partition: int, count: int) -> None:
    body = [
        {
            "key": b64(f"k{i}"),
            "value": b64(f"v{i}"),
            "headers": [{"key": "trace", "value": b64(f"t{i}")}],
        }
        for i in range(count)
    ]
    response = produce(client, topic, body, partition=partition)
    assert response.status_code == 200, response.text


def dead_letter(client, group: str, member: dict | None, **body) -> httpx.Response:
    if member is not None:
        body |= {"member_id": member["member_id"], "generation_id": member["generation_id"]}
    return client.post(f"/groups/{group}/dead-letters", json=body)


def read_all(client, topic: str, partition: int) -> list[dict]:
    response = fetch(client, topic, partition, 0)
    assert response.status_code == 200, response.text
    return response.json()


def headers_of(item: dict) -> dict[str, bytes | None]:
    return {h["key"]: unb64(h["value"]) for h in item.get("headers") or []}


def committed(client, group: str) -> dict[tuple[str, int], int]:
    offsets = client.get(f"/groups/{group}/offsets").json()["offsets"]
    return {(o["topic"], o["partition"]): o["offset"] for o in offsets}


def test_a_member_dead_letters_a_record_and_commits_past_it(client, topic_name):
    create_topic(client, topic_name, partitions=2)
    produce_keyed(client, topic_name, 1, 5)
    group = f"g-{topic_name}"
    member = join(client, group, topic_name)

    response = dead_letter(
        client, group, member, topic=topic_name, partition=1, offset=2, error="bad json", attempts=3
    )

    assert response.status_code == 200, response.text
    ack = response.json()
    dlq = f"{topic_name}.dlq"
    assert ack == {"dead_letter_topic": dlq, "partition": 1, "offset": 0, "committed_offset": 3}
    assert len(client.get(f"/topics/{dlq}").json()["partitions"]) == 2  # as the source
    [letter] = read_all(client, dlq, 1)
    source = read_all(client, topic_name, 1)[2]
    assert (unb64(letter["key"]), unb64(letter["value"])) == (b"k2", b"v2")
    assert headers_of(letter) == {
        "trace": b"t2",
        "lakelog.dlq.source.topic": topic_name.encode(),
        "lakelog.dlq.source.partition": b"1",
        "lakelog.dlq.source.offset": b"2",
        "lakelog.dlq.source.timestamp": str(source["timestamp"]).encode(),
        "lakelog.dlq.group": group.encode(),
        "lakelog.dlq.error": b"bad json",
        "lakelog.dlq.attempts": b"3",
    }
    assert committed(client, group) == {(topic_name, 1): 3}


def test_an_older_dead_letter_never_moves_the_committed_offset_back(client, topic_name):
    create_topic(client, topic_name)
    produce_keyed(client, topic_name, 0, 6)
    group = f"g-{topic_name}"
    member = join(client, group, topic_name)
    commit = {
        "member_id": member["member_id"],
        "generation_id": member["generation_id"],
        "offsets": [{"topic": topic_name, "partition": 0, "offset": 5}],
    }
    assert client.post(f"/groups/{group}/offsets", json=commit).status_code == 204

    response = dead_letter(
        client, group, member, topic=topic_name, partition=0, offset=1, error="e"
    )

    assert response.status_code == 200, response.text
    assert response.json()["committed_offset"] == 5
    assert committed(client, group) == {(topic_name, 0): 5}


def test_a_fenced_member_leaves_no_dead_letter(client, topic_name, gateway):
    create_topic(client, topic_name)
    produce_keyed(client, topic_name, 0, 3)
    dlq = f"{topic_name}.dlq"
    create_topic(client, dlq)
    group = f"g-{topic_name}"
    stale = join(client, group, topic_name, session_timeout_ms=6000)
    client.delete(f"/groups/{group}/members/{stale['member_id']}")
    join(client, group, topic_name)  # a new generation without the stale member

    response = dead_letter(client, group, stale, topic=topic_name, partition=0, offset=0, error="e")

    assert_error(response, 409, 40911)  # UNKNOWN_MEMBER_ID: it must join again
    assert read_all(client, dlq, 0) == []
    assert committed(client, group) == {}


def test_bad_dead_letter_requests_are_refused_with_what_to_fix(client, topic_name):
    create_topic(client, topic_name)
    produce_keyed(client, topic_name, 0, 2)
    group = f"g-{topic_name}"  # no members: commits outside a generation are allowed
    base = {"topic": topic_name, "partition": 0, "offset": 0, "error": "e"}
    assert_error(dead_letter(client, group, None, **base | {"error": ""}), 422, 422)
    assert_error(dead_letter(client, group, None, **base | {"attempts": 0}), 422, 422)
    assert_error(dead_letter(client, group, None, **base | {"offset": 2}), 416, 41601)
    same = base | {"dead_letter_topic": topic_name}
    assert_error(dead_letter(client, group, None, **same), 422, 42212)
    assert_error(dead_letter(client, group, None, **base | {"topic": "no-such"}), 404, 40401)
    assert_error(dead_letter(client, group, None, **base | {"partition": 3}), 404, 40402)
    assert client.get(f"/topics/{topic_name}.dlq").status_code == 404  # nothing was created


def test_a_rest_instance_dead_letters_to_a_named_topic(client, topic_name):
    create_topic(client, topic_name)
    produce_keyed(client, topic_name, 0, 4)
    group = f"g-{topic_name}"
    consumer = new_consumer(client, group, **{"auto.commit.enable": "false"})
    subscribe(client, consumer, [topic_name])
    assert len(records(client, consumer, timeout=5000)) == 4
    errors = f"{topic_name}-errors"

    body = {
        "topic": topic_name,
        "partition": 0,
        "offset": 1,
        "error": "boom",
        "dead_letter_topic": errors,
    }
    response = client.post(f"{consumer}/dead-letters", json=body)

    assert response.status_code == 200, response.text
    assert response.json() == {
        "dead_letter_topic": errors,
        "partition": 0,
        "offset": 0,
        "committed_offset": 2,
    }
    [letter] = read_all(client, errors, 0)
    assert unb64(letter["value"]) == b"v1"
    assert headers_of(letter)["lakelog.dlq.error"] == b"boom"
    assert committed(client, group) == {(topic_name, 0): 2}
    unassigned = client.post(
        f"{consumer}/dead-letters", json=body | {"topic": errors, "dead_letter_topic": None}
    )
    assert_error(unassigned, 409, 40903)  # the instance does not hold that partition


def test_cli_lists_and_replays_dead_letters_once(client, topic_name, gateway):
    create_topic(client, topic_name, partitions=2)
    produce_keyed(client, topic_name, 0, 3)
    produce_keyed(client, topic_name, 1, 3)
    group = f"g-{topic_name}"
    for partition, offset in ((0, 1), (1, 2)):
        response = dead_letter(
            client, group, None, topic=topic_name, partition=partition, offset=offset, error="x\ny"
        )
        assert response.status_code == 200, response.text

    listed = cli(gateway, "dlq", "list", "--topic", topic_name)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["PARTITION", "OFFSET", "SOURCE", "ATTEMPTS", "GROUP", "ERROR"]
    assert [line.split()[:5] for line in lines[1:]] == [
        ["0", "0", f"{topic_name}-0@1", "1", group],
        ["1", "0", f"{topic_name}-1@2", "1", group],
    ]
    assert lines[1].endswith("x y")  # one line per dead letter

    replayed = cli(gateway, "dlq", "replay", "--topic", topic_name)
    assert replayed.returncode == 0, replayed.stderr
    assert "replayed 2 dead letter(s)" in replayed.stdout
    for partition, offset in ((0, 1), (1, 2)):
        last = read_all(client, topic_name, partition)[-1]
        assert last["offset"] == 3
        assert unb64(last["value"]) == f"v{offset}".encode()
        assert headers_of(last) == {
            "trace": f"t{offset}".encode(),
            "lakelog.dlq.replayed.from": f"{topic_name}.dlq/{partition}/0".encode(),
            "lakelog.dlq.attempts": b"1",
        }

    again = cli(gateway, "dlq", "replay", "--topic", topic_name)
    assert again.returncode == 0, again.stderr
    assert "replayed 0 dead letter(s)" in again.stdout
    assert [len(read_all(client, topic_name, p)) for p in (0, 1)] == [4, 4]


def test_a_record_removed_by_compaction_is_refused_as_not_found(client, gateway, topic_name):
    create_topic(
        client, topic_name, segment_bytes=1000, cleanup_policy="compact", min_compaction_lag_ms=0
    )
    for index in range(80):  # two keys, many segments: the early values are compacted away
        record = {"key": b64(f"k{index % 2}"), "value": b64("v" * 40)}
        assert produce(client, topic_name, [record], partition=0).status_code == 200
    summary = run_job(
        JobRequest(job="compact-keys", root=str(gateway.data_dir), topics=(topic_name,)),
        out=lambda line: None,
    )
    assert summary.failed == 0
    deadline = time.monotonic() + CATCH_UP_S
    while read_all(client, topic_name, 0)[0]["offset"] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert read_all(client, topic_name, 0)[0]["offset"] > 0

    response = dead_letter(
        client, f"g-{topic_name}", None, topic=topic_name, partition=0, offset=0, error="e"
    )

    assert_error(response, 404, 40406)
