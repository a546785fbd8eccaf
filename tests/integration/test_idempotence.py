"""Idempotent produce, acks and producer ids over real gateway processes and Delta tables."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from deltalake import DeltaTable

from tests.gateway_process import start_gateway
from tests.integration.helpers import BINARY_V2, V3, assert_error, b64, create_topic, fetch

pytestmark = pytest.mark.gateway


def init_producer(client: httpx.Client, **body) -> tuple[int, int]:
    response = client.post(f"{V3}/producers", json=body or None)
    assert response.status_code == 200, response.text
    return response.json()["producer_id"], response.json()["producer_epoch"]


def produce_idempotent(client, topic, values, *, pid, epoch, sequence, partition=0, **params):
    """v2 produce to a partition URL with producer fields."""
    body = {
        "producer_id": pid,
        "producer_epoch": epoch,
        "base_sequence": sequence,
        "records": [{"value": b64(v)} for v in values],
    }
    return client.post(
        f"/topics/{topic}/partitions/{partition}",
        json=body,
        params=params,
        headers={"Content-Type": BINARY_V2},
    )


def offsets_of(response: httpx.Response) -> list[int]:
    assert response.status_code == 200, response.text
    return [entry["offset"] for entry in response.json()["offsets"]]


def table_values(data_dir, topic: str, partition: int = 0) -> list[bytes]:
    table = DeltaTable(str(data_dir / "topics" / topic / str(partition))).to_pyarrow_table()
    return table.sort_by("offset").column("value").to_pylist()


# ---- producer ids ---------------------------------------------------------------------------


def test_producer_ids_are_distinct_and_start_at_epoch_zero(client):
    """Each plain initialisation gets a new producer id at epoch 0."""
    first, second = init_producer(client), init_producer(client, client_id="app")
    assert first[0] != second[0] and first[1] == second[1] == 0


def test_transactional_id_bump_fences_the_old_epoch(client, topic_name):
    """Re-initialising a transactional id bumps the epoch; the old epoch is then fenced."""
    create_topic(client, topic_name)
    pid, epoch = init_producer(client, transactional_id=f"tx-{topic_name}")
    assert offsets_of(
        produce_idempotent(client, topic_name, ["a"], pid=pid, epoch=epoch, sequence=0)
    ) == [0]
    same_pid, new_epoch = init_producer(client, transactional_id=f"tx-{topic_name}")
    assert (same_pid, new_epoch) == (pid, epoch + 1)
    assert offsets_of(
        produce_idempotent(client, topic_name, ["b"], pid=pid, epoch=new_epoch, sequence=0)
    ) == [1]
    stale = produce_idempotent(client, topic_name, ["c"], pid=pid, epoch=epoch, sequence=1)
    body = assert_error(stale, 409, 40906)
    assert body["offsets"][0]["error_code"] == 40906


def test_concurrent_allocations_never_collide(client):
    """Sixteen allocations at once over HTTP get sixteen different ids."""
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda _: init_producer(client)[0], range(16)))
    assert len(set(ids)) == 16


def test_producers_unknown_cluster_is_404(client):
    """The producers endpoint checks the cluster id like every v3 route."""
    assert client.post("/v3/clusters/nope/producers").status_code == 404


# ---- idempotent produce ---------------------------------------------------------------------


def test_v2_retry_returns_original_offsets_and_one_copy(client, gateway, topic_name):
    """A retried v2 batch is acknowledged with its first offsets and stored once."""
    create_topic(client, topic_name)
    pid, epoch = init_producer(client)
    first = produce_idempotent(client, topic_name, ["x", "y"], pid=pid, epoch=epoch, sequence=0)
    retry = produce_idempotent(client, topic_name, ["x", "y"], pid=pid, epoch=epoch, sequence=0)
    assert offsets_of(first) == offsets_of(retry) == [0, 1]
    assert table_values(gateway.data_dir, topic_name) == [b"x", b"y"]


def test_v2_sequence_errors_are_409(client, topic_name):
    """A gap is 40904, a sequence older than the window 40905, an unknown producer 40907."""
    create_topic(client, topic_name)
    pid, epoch = init_producer(client)
    for sequence in range(6):
        produce_idempotent(client, topic_name, ["v"], pid=pid, epoch=epoch, sequence=sequence)
    gap = produce_idempotent(client, topic_name, ["v"], pid=pid, epoch=epoch, sequence=9)
    assert_error(gap, 409, 40904)
    old = produce_idempotent(client, topic_name, ["v"], pid=pid, epoch=epoch, sequence=0)
    assert_error(old, 409, 40905)
    other, _ = init_producer(client)
    unknown = produce_idempotent(client, topic_name, ["v"], pid=other, epoch=0, sequence=3)
    assert_error(unknown, 409, 40907)


def test_v2_topic_url_base_sequences_per_partition(client, gateway, topic_name):
    """On a topic URL each partition's records get consecutive sequences from base_sequences."""
    create_topic(client, topic_name, 2)
    pid, epoch = init_producer(client)
    body = {
        "producer_id": pid,
        "producer_epoch": epoch,
        "base_sequences": {"0": 0, "1": 0},
        "records": [{"value": b64(f"v{i}"), "partition": i % 2} for i in range(4)],
    }
    headers = {"Content-Type": BINARY_V2}
    first = client.post(f"/topics/{topic_name}", json=body, headers=headers)
    retry = client.post(f"/topics/{topic_name}", json=body, headers=headers)
    assert offsets_of(first) == offsets_of(retry) == [0, 0, 1, 1]
    table = DeltaTable(str(gateway.data_dir / "topics" / topic_name / "1")).to_pyarrow_table()
    assert table.sort_by("offset").column("sequence").to_pylist() == [0, 1]
    missing = {**body, "base_sequences": {"0": 2}}
    response = client.post(f"/topics/{topic_name}", json=missing, headers=headers)
    assert_error(response, 422, 42209)
    assert "partition 1" in response.json()["message"]


@pytest.mark.parametrize(
    "fields",
    [
        {"producer_id": 1},
        {"producer_id": "1", "producer_epoch": 0, "base_sequence": 0},
        {"producer_id": 1, "producer_epoch": 0, "base_sequence": -1},
        {"producer_id": 1, "producer_epoch": 70000, "base_sequence": 0},
    ],
)
def test_v2_bad_producer_fields_are_422(client, topic_name, fields):
    """Missing or malformed producer fields are 422 42209, nothing appended."""
    create_topic(client, topic_name)
    body = {**fields, "records": [{"value": b64("v")}]}
    response = client.post(
        f"/topics/{topic_name}/partitions/0", json=body, headers={"Content-Type": BINARY_V2}
    )
    assert_error(response, 422, 42209)


def test_v3_record_retry_returns_the_same_offset(client, gateway, topic_name):
    """A v3 record with producer fields is a batch of one; its retry returns the same offset."""
    create_topic(client, topic_name)
    pid, epoch = init_producer(client)
    path = f"{V3}/topics/{topic_name}/records"
    records = [
        {"producer_id": pid, "producer_epoch": epoch, "sequence": s, "value": {"data": s}}
        for s in range(3)
    ]
    offsets = [client.post(path, json=r).json()["offset"] for r in records]
    retry = client.post(path, json=records[1])
    assert retry.status_code == 200 and retry.json()["offset"] == offsets[1] == 1
    gap = client.post(path, json={**records[0], "sequence": 7})
    assert_error(gap, 409, 40904)
    assert table_values(gateway.data_dir, topic_name) == [b"0", b"1", b"2"]


def test_concurrent_idempotent_producers_keep_offsets_dense(gateway, topic_name):
    """Eight producers, each sending (and re-sending) 20 batches: offsets 0..N-1, one copy each."""
    with httpx.Client(base_url=gateway.url, timeout=60.0) as admin:
        create_topic(admin, topic_name)
    errors: list[str] = []

    def worker(thread: int) -> None:
        with httpx.Client(base_url=gateway.url, timeout=60.0) as http:
            pid, epoch = init_producer(http)
            for batch in range(20):
                values = [f"{thread}-{batch}-{i}" for i in range(5)]
                acks = [
                    produce_idempotent(
                        http, topic_name, values, pid=pid, epoch=epoch, sequence=batch * 5
                    )
                    for _ in range(2)
                ]
                if len({tuple(offsets_of(a)) for a in acks}) != 1:
                    errors.append(f"retry got other offsets: {[a.text for a in acks]}")

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    assert not errors, errors[:3]
    values = table_values(gateway.data_dir, topic_name)
    assert len(values) == len(set(values)) == 8 * 20 * 5
    table = DeltaTable(str(gateway.data_dir / "topics" / topic_name / "0")).to_pyarrow_table()
    assert sorted(table.column("offset").to_pylist()) == list(range(800))


def test_crash_between_commit_and_ack_then_retry_gets_one_copy(tmp_path):
    """The gateway dies after the commit, before the ack; the retry on a new gateway over the
    same data gets the original offsets and the partition holds exactly one copy."""
    data_dir = tmp_path / "data"
    setup = start_gateway(data_dir)
    try:
        with httpx.Client(base_url=setup.url, timeout=30.0) as http:
            create_topic(http, "crash")
            plain = {"records": [{"value": b64("before")}]}
            http.post("/topics/crash", json=plain, headers={"Content-Type": BINARY_V2})
            pid, epoch = init_producer(http)
    finally:
        setup.stop()
    faulty = start_gateway(data_dir, env={"LAKELOG_FAULT_POINT": "after_commit_before_ack"})
    try:
        with (
            httpx.Client(base_url=faulty.url, timeout=30.0) as http,
            pytest.raises(httpx.TransportError),
        ):
            produce_idempotent(http, "crash", ["a", "b"], pid=pid, epoch=epoch, sequence=0)
        assert faulty.process.wait(30) == 75
    finally:
        faulty.stop()
    recovered = start_gateway(data_dir)
    try:
        with httpx.Client(base_url=recovered.url, timeout=30.0) as http:
            retry = produce_idempotent(http, "crash", ["a", "b"], pid=pid, epoch=epoch, sequence=0)
            assert offsets_of(retry) == [1, 2]
            fetched = fetch(http, "crash", 0, 0).json()
            assert [r["offset"] for r in fetched] == [0, 1, 2]
    finally:
        recovered.stop()
    assert table_values(data_dir, "crash") == [b"before", b"a", b"b"]


# ---- acks -----------------------------------------------------------------------------------


def test_acks_zero_is_202_with_null_offsets_and_the_records_land(client, topic_name):
    """acks=0 answers 202 once queued, offsets null; the records are committed soon after."""
    create_topic(client, topic_name)
    response = client.post(
        f"/topics/{topic_name}?acks=0",
        json={"records": [{"value": b64("q1")}, {"value": b64("q2")}]},
        headers={"Content-Type": BINARY_V2},
    )
    assert response.status_code == 202, response.text
    assert [e["offset"] for e in response.json()["offsets"]] == [None, None]
    fetched = fetch(client, topic_name, 0, 0, timeout=5000).json()
    assert len(fetched) >= 1


@pytest.mark.parametrize("acks", ["1", "all", "-1"])
def test_acks_one_and_all_answer_after_the_commit(client, topic_name, acks):
    """acks=1, all and -1 answer 200 with offsets that are already readable."""
    create_topic(client, topic_name)
    response = client.post(
        f"/topics/{topic_name}",
        params={"acks": acks},
        json={"records": [{"value": b64("v")}]},
        headers={"Content-Type": BINARY_V2},
    )
    assert offsets_of(response) == [0]
    assert len(fetch(client, topic_name, 0, 0).json()) == 1


@pytest.mark.parametrize("acks", ["2", "none", ""])
def test_bad_acks_is_422(client, topic_name, acks):
    """Any other acks value is 422 on v2 and v3."""
    create_topic(client, topic_name)
    v2 = client.post(
        f"/topics/{topic_name}",
        params={"acks": acks},
        json={"records": [{"value": b64("v")}]},
        headers={"Content-Type": BINARY_V2},
    )
    assert_error(v2, 422, 422)
    v3 = client.post(f"{V3}/topics/{topic_name}/records", params={"acks": acks}, json={})
    assert_error(v3, 422, 422)


def test_v3_acks_zero_reports_202(client, topic_name):
    """A v3 record with acks=0 gets a 202 report with a null offset."""
    create_topic(client, topic_name)
    response = client.post(
        f"{V3}/topics/{topic_name}/records", params={"acks": "0"}, json={"value": {"data": 1}}
    )
    assert response.status_code == 202 and response.json()["offset"] is None
