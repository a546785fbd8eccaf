"""Transactions over HTTP (routes/v3_transactions.py) against a real gateway process: begin,
produce within, send a group's offsets, commit and abort, with what read_committed readers,
the committed offsets and a fenced producer see at each step."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.helpers import V3, assert_error, create_topic

pytestmark = pytest.mark.gateway


def begin(client: httpx.Client, transactional_id: str, **body) -> dict:
    response = client.post(f"{V3}/transactions/{transactional_id}/begin", json=body or None)
    assert response.status_code == 200, response.text
    return response.json()


def produce(
    client: httpx.Client, topic: str, producer: dict, partition: int, sequence: int, value: str
) -> httpx.Response:
    record = {
        "partition_id": partition,
        "value": {"type": "STRING", "data": value},
        "transactional_id": producer["transactional_id"],
        "producer_id": producer["producer_id"],
        "producer_epoch": producer["producer_epoch"],
        "sequence": sequence,
    }
    return client.post(f"{V3}/topics/{topic}/records", json=record)


def end(client: httpx.Client, producer: dict, verb: str) -> httpx.Response:
    body = {"producer_id": producer["producer_id"], "producer_epoch": producer["producer_epoch"]}
    return client.post(f"{V3}/transactions/{producer['transactional_id']}/{verb}", json=body)


def values(client: httpx.Client, topic: str, partition: int, isolation: str) -> list[str]:
    response = client.get(
        f"/topics/{topic}/partitions/{partition}/records",
        params={"offset": 0, "isolation.level": isolation},
        headers={"Accept": "application/vnd.kafka.json.v2+json"},
    )
    assert response.status_code == 200, response.text
    return [record["value"] for record in response.json()]


def test_committed_records_show_to_read_committed_readers_only_after_the_commit(client, topic_name):
    create_topic(client, topic_name, partitions=2)
    producer = begin(client, f"copy-{topic_name}")
    assert produce(client, topic_name, producer, 0, 0, '"a"').status_code == 200
    assert produce(client, topic_name, producer, 1, 0, '"b"').status_code == 200
    assert produce(client, topic_name, producer, 0, 1, '"c"').status_code == 200
    assert values(client, topic_name, 0, "read_committed") == []
    assert values(client, topic_name, 0, "read_uncommitted") == ["a", "c"]
    state = client.get(f"{V3}/transactions/{producer['transactional_id']}").json()
    assert state["state"] == "Ongoing"
    assert sorted(p["partition_id"] for p in state["topic_partitions"]) == [0, 1]

    committed = end(client, producer, "commit")
    assert committed.status_code == 200, committed.text
    assert values(client, topic_name, 0, "read_committed") == ["a", "c"]
    assert values(client, topic_name, 1, "read_committed") == ["b"]
    state = client.get(f"{V3}/transactions/{producer['transactional_id']}").json()
    assert (state["state"], state["topic_partitions"]) == ("CompleteCommit", [])
    # The epoch is bumped at every end: the next transaction uses the new one, from 0.
    following = committed.json()
    assert following["producer_epoch"] == producer["producer_epoch"] + 1
    assert end(client, producer, "commit").json() == following  # a retry: answered again

    assert produce(client, topic_name, following, 0, 0, '"d"').status_code == 200
    assert end(client, following, "abort").status_code == 200
    assert values(client, topic_name, 0, "read_committed") == ["a", "c"]
    assert values(client, topic_name, 0, "read_uncommitted") == ["a", "c", "d"]


def test_a_late_retry_of_an_ended_transactions_record_is_fenced(client, topic_name):
    """Without the bump, a retried produce arriving after the commit would open a
    transaction of the old epoch that nobody ends, holding read_committed readers back."""
    create_topic(client, topic_name)
    producer = begin(client, f"late-{topic_name}")
    assert produce(client, topic_name, producer, 0, 0, '"on-time"').status_code == 200
    assert end(client, producer, "commit").status_code == 200
    assert_error(produce(client, topic_name, producer, 0, 1, '"late"'), 409, 40906)
    offsets = client.get(f"/topics/{topic_name}/partitions/0/offsets").json()
    assert offsets["last_stable_offset"] == offsets["end_offset"]  # nothing left open


def test_a_retried_produce_within_a_transaction_is_not_written_twice(client, topic_name):
    create_topic(client, topic_name)
    producer = begin(client, f"retry-{topic_name}")
    first = produce(client, topic_name, producer, 0, 0, '"once"').json()
    retried = produce(client, topic_name, producer, 0, 0, '"once"').json()
    assert retried["offset"] == first["offset"]
    assert end(client, producer, "commit").status_code == 200
    assert values(client, topic_name, 0, "read_committed") == ["once"]


def test_offsets_sent_within_a_transaction_are_committed_with_it(client, topic_name):
    create_topic(client, topic_name)
    group = f"group-{topic_name}"
    offsets_url = f"/groups/{group}/offsets"

    def committed() -> dict:
        response = client.get(offsets_url)
        if response.status_code == 404:  # no offsets (and no members) yet
            return {}
        return {o["partition"]: o["offset"] for o in response.json()["offsets"]}

    for verb, expected in (("abort", {}), ("commit", {0: 7})):
        producer = begin(client, f"offsets-{topic_name}")
        body = {
            "producer_id": producer["producer_id"],
            "producer_epoch": producer["producer_epoch"],
            "offsets": [{"topic_name": topic_name, "partition_id": 0, "offset": 7}],
        }
        url = f"{V3}/transactions/{producer['transactional_id']}/consumer-groups/{group}/offsets"
        response = client.post(url, json=body)
        assert response.status_code == 204, response.text
        assert committed() == {}
        assert end(client, producer, verb).status_code == 200
        assert committed() == expected


def test_begin_again_fences_the_older_producer_and_aborts_its_transaction(client, topic_name):
    create_topic(client, topic_name)
    transactional_id = f"zombie-{topic_name}"
    zombie = begin(client, transactional_id)
    assert produce(client, topic_name, zombie, 0, 0, '"from-the-zombie"').status_code == 200
    successor = begin(client, transactional_id)
    assert successor["producer_id"] == zombie["producer_id"]
    assert successor["producer_epoch"] > zombie["producer_epoch"]
    assert_error(produce(client, topic_name, zombie, 0, 1, '"late"'), 409, 40906)
    assert_error(end(client, zombie, "commit"), 409, 40906)
    assert produce(client, topic_name, successor, 0, 0, '"from-the-successor"').status_code == 200
    assert end(client, successor, "commit").status_code == 200
    assert values(client, topic_name, 0, "read_committed") == ["from-the-successor"]


def test_bad_transactional_requests_get_clear_errors(client, topic_name):
    create_topic(client, topic_name)
    unknown = client.get(f"{V3}/transactions/never-begun-{topic_name}")
    assert "begin" in assert_error(unknown, 404, 40407)["message"]
    producer = begin(client, f"errors-{topic_name}")
    # Nothing is open yet: committing it is a no-op (Kafka's clients send nothing then).
    nothing = end(client, producer, "commit")
    assert nothing.status_code == 200, nothing.text
    assert nothing.json()["producer_epoch"] == producer["producer_epoch"]
    wrong_id = dict(producer, producer_id=producer["producer_id"] + 1000)
    assert_error(end(client, wrong_id, "commit"), 409, 40919)
    timeout = client.post(
        f"{V3}/transactions/t-{topic_name}/begin", json={"transaction_timeout_ms": 10**9}
    )
    assert timeout.status_code == 422
    record = {"value": {"type": "STRING", "data": "x"}, "transactional_id": "t"}
    no_producer = client.post(f"{V3}/topics/{topic_name}/records", json=record)
    assert "producer_id" in assert_error(no_producer, 422, 42209)["message"]
