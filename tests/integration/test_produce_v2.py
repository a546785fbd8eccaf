"""v2 produce end to end: formats, routing, dense offsets, content types, errors and limits."""

from __future__ import annotations

import socket
import threading
from collections import Counter

import httpx
import pytest

from storage_layout.partitioner import partition_for_key
from tests.integration.helpers import (
    BINARY_V2,
    JSON_V2,
    assert_error,
    b64,
    create_topic,
    fetch,
    gateway_with,
    produce,
    unb64,
)

pytestmark = pytest.mark.gateway

REQUEST_BYTES_MAX = 64 * 1024
RECORDS_PER_REQUEST_MAX = 5


@pytest.fixture(scope="module")
def small_gateway(tmp_path_factory):
    """A gateway with a 64 KiB body limit and at most 5 records per request."""
    env = {
        "LAKELOG_REQUEST_BYTES_MAX": str(REQUEST_BYTES_MAX),
        "LAKELOG_RECORDS_PER_REQUEST_MAX": str(RECORDS_PER_REQUEST_MAX),
    }
    with gateway_with(tmp_path_factory, "small-v2", env) as process:
        yield process


@pytest.fixture
def small_client(small_gateway):
    with httpx.Client(base_url=small_gateway.url, timeout=30.0) as http:
        yield http


@pytest.fixture(scope="module")
def shared_topic(gateway):
    """One topic for the many parametrized cases that write nothing or one record each."""
    with httpx.Client(base_url=gateway.url, timeout=30.0) as http:
        create_topic(http, "produce-v2-shared")
    return "produce-v2-shared"


def _end_offset(client, topic, partition=0) -> int:
    return client.get(f"/topics/{topic}/partitions/{partition}/offsets").json()["end_offset"]


def _fetch_all(client, topic, partition=0, accept=BINARY_V2) -> list[dict]:
    response = fetch(client, topic, partition, 0, accept=accept, max_bytes=64 * 1024 * 1024)
    assert response.status_code == 200, response.text
    return response.json()


# ---- response shape and round trips ------------------------------------------------------------


def test_binary_produce_response_shape_one_entry_per_record(client, topic_name):
    """The response has null schema ids and one offsets entry per record, in request order."""
    create_topic(client, topic_name)
    response = produce(client, topic_name, [{"value": b64(f"v{i}")} for i in range(3)])
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {
        "key_schema_id": None,
        "value_schema_id": None,
        "offsets": [
            {"partition": 0, "offset": i, "error_code": None, "error": None} for i in range(3)
        ],
    }


def test_binary_records_fetched_back_byte_identical(client, topic_name):
    """Keys, null keys, tombstones and arbitrary bytes come back exactly as produced."""
    create_topic(client, topic_name)
    sent = [
        (b"k\x00\xff", b"\x00\x01\x02\xfe\xff"),
        (None, b"no key"),
        (b"deleted", None),
        (b"", b""),
        (None, "ünïcødé ✓".encode()),
    ]
    records = [{"key": b64(key), "value": b64(value)} for key, value in sent]
    assert produce(client, topic_name, records).status_code == 200
    fetched = _fetch_all(client, topic_name)
    assert [(unb64(r["key"]), unb64(r["value"])) for r in fetched] == sent
    assert [r["offset"] for r in fetched] == list(range(len(sent)))


def test_json_records_round_trip_as_json(client, topic_name):
    """json.v2 keys and values come back as the same JSON values (null value = tombstone)."""
    create_topic(client, topic_name)
    values = [{"a": [1, 2.5, None], "b": {"c": "d"}}, [1, "two"], "text", 42, True, None]
    records = [{"key": {"id": i}, "value": v} for i, v in enumerate(values)]
    response = produce(client, topic_name, records, content_type=JSON_V2)
    assert response.status_code == 200, response.text
    fetched = _fetch_all(client, topic_name, accept=JSON_V2)
    assert [r["value"] for r in fetched] == values
    assert [r["key"] for r in fetched] == [{"id": i} for i in range(len(values))]


def test_json_record_is_stored_as_json_bytes(client, topic_name):
    """A json.v2 value is stored as its JSON text (visible through a binary fetch)."""
    create_topic(client, topic_name)
    produce(client, topic_name, [{"value": {"x": 1}}], content_type=JSON_V2)
    (record,) = _fetch_all(client, topic_name)
    assert unb64(record["value"]) == b'{"x":1}'


def test_headers_extension_round_trips(client, topic_name):
    """Record headers [{"key", "value": b64|null}] come back in order, repeated names kept."""
    create_topic(client, topic_name)
    headers = [
        {"key": "trace", "value": b64(b"\x00abc")},
        {"key": "trace", "value": b64("second")},
        {"key": "empty", "value": None},
    ]
    produce(client, topic_name, [{"value": b64("v"), "headers": headers}, {"value": b64("w")}])
    with_headers, without = _fetch_all(client, topic_name)
    assert with_headers["headers"] == headers
    assert "headers" not in without


def test_timestamp_extension_epoch_ms_and_iso(client, topic_name):
    """A record timestamp (epoch ms or ISO-8601) is kept as its CreateTime."""
    create_topic(client, topic_name)
    records = [
        {"value": b64("a"), "timestamp": 1_612_552_482_123},
        {"value": b64("b"), "timestamp": "2021-02-05T19:14:42.5Z"},
    ]
    produce(client, topic_name, records)
    first, second = _fetch_all(client, topic_name)
    assert first["timestamp"] == 1_612_552_482_123
    assert second["timestamp"] == 1_612_552_482_500
    assert first["timestamp_type"] == second["timestamp_type"] == "CreateTime"


def test_produce_to_partition_url_binary_and_json(client, topic_name):
    """The partition URL writes every record to that partition, in binary and json formats."""
    create_topic(client, topic_name, 3)
    binary = produce(client, topic_name, [{"key": b64("k"), "value": b64("a")}], partition=2)
    json_ = produce(client, topic_name, [{"value": {"n": 1}}], partition=2, content_type=JSON_V2)
    assert binary.json()["offsets"][0] == {
        "partition": 2,
        "offset": 0,
        "error_code": None,
        "error": None,
    }
    assert json_.json()["offsets"][0]["partition"] == 2
    assert json_.json()["offsets"][0]["offset"] == 1
    assert [r["offset"] for r in _fetch_all(client, topic_name, 2)] == [0, 1]


# ---- routing --------------------------------------------------------------------------------


def test_keyed_records_follow_kafka_murmur2(client, topic_name):
    """A key always lands on toPositive(murmur2(key)) % n, the Java client's partition."""
    create_topic(client, topic_name, 7)
    # Kafka UtilsTest.testMurmur2: "21" -> -973932308, "foobar" -> -790332482, "abc" -> 479470107.
    kafka_vectors = {b"21": 3, b"foobar": 0, b"abc": 4, b"a-little-bit-long-string": 1}
    keys = [*kafka_vectors, *(f"user-{i}".encode() for i in range(30))]
    for _ in range(2):  # the same key twice lands on the same partition
        records = [{"key": b64(key), "value": b64("v")} for key in keys]
        offsets = produce(client, topic_name, records).json()["offsets"]
        got = {key: entry["partition"] for key, entry in zip(keys, offsets, strict=True)}
        assert got == {key: partition_for_key(key, 7) for key in keys}
        assert {key: got[key] for key in kafka_vectors} == kafka_vectors
    assert len(set(got.values())) > 1


def test_keyless_records_round_robin_over_all_partitions(client, topic_name):
    """Null-key records spread evenly over every partition."""
    create_topic(client, topic_name, 4)
    offsets = produce(client, topic_name, [{"value": b64(str(i))} for i in range(12)]).json()
    counts = Counter(entry["partition"] for entry in offsets["offsets"])
    assert counts == {0: 3, 1: 3, 2: 3, 3: 3}


def test_explicit_partition_in_record_wins_over_key(client, topic_name):
    """A record's `partition` field is honoured even when it has a key."""
    create_topic(client, topic_name, 5)
    key = b"foobar"
    target = (partition_for_key(key, 5) + 1) % 5
    records = [{"key": b64(key), "value": b64("v"), "partition": target}]
    assert produce(client, topic_name, records).json()["offsets"][0]["partition"] == target


def test_records_of_one_request_get_contiguous_offsets_per_partition(client, topic_name):
    """Records routed to one partition keep request order with consecutive offsets."""
    create_topic(client, topic_name, 2)
    records = [{"value": b64(str(i)), "partition": i % 2} for i in range(10)]
    offsets = produce(client, topic_name, records).json()["offsets"]
    for partition in (0, 1):
        mine = [e["offset"] for e in offsets if e["partition"] == partition]
        assert mine == list(range(5))
        values = [unb64(r["value"]) for r in _fetch_all(client, topic_name, partition)]
        assert values == [str(i).encode() for i in range(partition, 10, 2)]


def test_concurrent_producers_get_dense_unique_offsets(gateway, topic_name):
    """8 threads x 50 requests x 10 records: offsets are exactly 0..3999, each with its value."""
    threads_count, requests_count, batch = 8, 50, 10
    with httpx.Client(base_url=gateway.url, timeout=60.0) as admin:
        create_topic(admin, topic_name)
    acked: dict[int, bytes] = {}
    lock = threading.Lock()
    errors: list[str] = []

    def worker(thread: int) -> None:
        with httpx.Client(base_url=gateway.url, timeout=60.0) as http:
            for request in range(requests_count):
                values = [f"{thread}-{request}-{i}".encode() for i in range(batch)]
                response = produce(http, topic_name, [{"value": b64(v)} for v in values])
                if response.status_code != 200:
                    errors.append(response.text)
                    return
                offsets = [entry["offset"] for entry in response.json()["offsets"]]
                if offsets != list(range(offsets[0], offsets[0] + batch)):
                    errors.append(f"not contiguous: {offsets}")
                with lock:
                    for offset, value in zip(offsets, values, strict=True):
                        if offset in acked:
                            errors.append(f"offset {offset} acked twice")
                        acked[offset] = value

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads_count)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    assert not errors, errors[:3]
    total = threads_count * requests_count * batch
    assert sorted(acked) == list(range(total))
    with httpx.Client(base_url=gateway.url, timeout=60.0) as http:
        fetched = _fetch_all(http, topic_name)
        assert http.get(f"/topics/{topic_name}/partitions/0/offsets").json()["end_offset"] == total
    assert [r["offset"] for r in fetched] == list(range(total))
    assert {r["offset"]: unb64(r["value"]) for r in fetched} == acked


# ---- content types --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        BINARY_V2,
        "application/vnd.kafka.binary.v1+json",
        "application/vnd.kafka.v2+json",
        "application/vnd.kafka+json",
        "application/json",
        "application/octet-stream",
        "application/vnd.kafka.binary.v2+json; charset=utf-8",
        "APPLICATION/VND.KAFKA.BINARY.V2+JSON",
    ],
)
def test_binary_content_types_accepted(client, shared_topic, content_type):
    """Binary (base64) bodies are accepted under v2, v1, generic and octet-stream types."""
    response = produce(
        client, shared_topic, [{"value": b64(content_type)}], content_type=content_type
    )
    assert response.status_code == 200, response.text
    offset = response.json()["offsets"][0]["offset"]
    (record,) = fetch(client, shared_topic, 0, offset, max_bytes=1).json()
    assert unb64(record["value"]) == content_type.encode()


@pytest.mark.parametrize("content_type", [JSON_V2, "application/vnd.kafka.json.v1+json"])
def test_json_content_types_accepted(client, shared_topic, content_type):
    """The json embedded format is accepted in v2 and v1 spellings."""
    response = produce(client, shared_topic, [{"value": {"a": 1}}], content_type=content_type)
    assert response.status_code == 200, response.text
    offset = response.json()["offsets"][0]["offset"]
    (record,) = fetch(client, shared_topic, 0, offset, max_bytes=1).json()
    assert unb64(record["value"]) == b'{"a":1}'


@pytest.mark.parametrize(
    "content_type",
    [
        "application/vnd.kafka.cbor.v2+json",
        "application/vnd.kafka.v3+json",
        "application/vnd.kafka.binary.v1+foo",
        "application/vnd.kafka.avro.v0+json",
        "application/json+avro",
        "application/vnd.kafka",
        "application/text",
        "text/plain",
        "bar/baz",
    ],
)
def test_unsupported_content_types_are_415(client, shared_topic, content_type):
    """Unknown formats, other versions and non-JSON types are 415; nothing is written."""
    before = _end_offset(client, shared_topic)
    response = produce(client, shared_topic, [{"value": b64("x")}], content_type=content_type)
    assert_error(response, 415, 415)
    assert _end_offset(client, shared_topic) == before


def test_missing_content_type_is_415(client, shared_topic):
    """A body without Content-Type is 415."""
    response = client.post(f"/topics/{shared_topic}", content=b'{"records":[{"value":null}]}')
    assert_error(response, 415, 415)


# ---- request errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b'{"records": []}', 422, 422),
        (b'{"value_schema": "x"}', 422, 422),
        (b'{"records": {"value": "eA=="}}', 400, 400),
        (b'{"records": "eA=="}', 400, 400),
        (b'{"records": ["eA=="]}', 400, 400),
        (b'{"records": [{"valeu": "eA=="}]}', 422, 422),
        (b'{"records": [{"value": "not base64!"}]}', 400, 400),
        (b'{"records": [{"key": 5, "value": "eA=="}]}', 400, 400),
        (b'{"records": [{"value": "eA==", "partition": "0"}]}', 422, 422),
        (b'{"records": [{"value": "eA==", "headers": [{"key": "h", "value": "!"}]}]}', 400, 400),
        (b'{"records": [{"value": "eA==", "timestamp": -1}]}', 422, 422),
        (b"[]", 400, 400),
        (b'{"records": [', 400, 400),
        (b"not json", 400, 400),
        (b"", 422, 42206),
        (b"  \n ", 422, 42206),
    ],
)
def test_malformed_bodies(client, shared_topic, body, status, code):
    """Malformed bodies get Confluent/Karapace status and error codes; nothing is written."""
    before = _end_offset(client, shared_topic)
    response = client.post(
        f"/topics/{shared_topic}", content=body, headers={"Content-Type": BINARY_V2}
    )
    assert_error(response, status, code)
    assert _end_offset(client, shared_topic) == before


def test_one_bad_record_rejects_the_whole_request(client, shared_topic):
    """A malformed record (bad base64) fails the request; its valid neighbours are not written."""
    before = _end_offset(client, shared_topic)
    records = [{"value": b64("ok")}, {"value": "%%%"}]
    assert_error(produce(client, shared_topic, records), 400, 400)
    assert _end_offset(client, shared_topic) == before


def test_unknown_topic_is_404_40401_on_both_urls(client, topic_name):
    """Producing to a missing topic is 404 40401 on the topic and the partition URL."""
    assert_error(produce(client, topic_name, [{"value": b64("x")}]), 404, 40401)
    response = produce(client, topic_name, [{"value": b64("x")}], partition=0)
    assert_error(response, 404, 40401)


def test_unknown_partition_url_is_404_40402(client, topic_name):
    """Producing to a partition URL beyond the partition count is 404 40402."""
    create_topic(client, topic_name, 2)
    assert_error(produce(client, topic_name, [{"value": b64("x")}], partition=2), 404, 40402)


def test_partition_field_on_partition_url_is_422(client, topic_name):
    """A record naming a partition is 422 on the partition URL (even the same partition)."""
    create_topic(client, topic_name, 2)
    records = [{"value": b64("x"), "partition": 1}]
    assert_error(produce(client, topic_name, records, partition=1), 422, 422)


def test_oversized_record_alone_is_422_with_per_record_error(client, topic_name):
    """When every record exceeds max.message.bytes: 422, offsets[0] carries the error."""
    create_topic(client, topic_name, max_message_bytes=100)
    response = produce(client, topic_name, [{"value": b64(b"x" * 101)}])
    assert response.status_code == 422, response.text
    (entry,) = response.json()["offsets"]
    assert entry["partition"] is None and entry["offset"] is None
    assert entry["error_code"] == 50002
    assert "max.message.bytes" in entry["error"]


def test_partial_failure_is_200_with_per_record_error(client, topic_name):
    """One oversized record among good ones: 200, the others written at dense offsets."""
    create_topic(client, topic_name, max_message_bytes=100)
    records = [{"value": b64("a")}, {"value": b64(b"x" * 500)}, {"value": b64("b")}]
    response = produce(client, topic_name, records)
    assert response.status_code == 200, response.text
    first, failed, last = response.json()["offsets"]
    assert (first["offset"], first["error_code"]) == (0, None)
    assert (last["offset"], last["error_code"]) == (1, None)
    assert failed["offset"] is None and failed["error_code"] == 50002 and failed["error"]
    assert [unb64(r["value"]) for r in _fetch_all(client, topic_name)] == [b"a", b"b"]


def test_record_at_max_message_bytes_is_accepted(client, topic_name):
    """A record of exactly max.message.bytes (key + value) is accepted."""
    create_topic(client, topic_name, max_message_bytes=100)
    records = [{"key": b64(b"k" * 40), "value": b64(b"v" * 60)}]
    assert produce(client, topic_name, records).status_code == 200


def test_record_partition_out_of_range_fails_that_record(client, topic_name):
    """A record naming a missing partition fails alone; the others are written."""
    create_topic(client, topic_name, 2)
    records = [{"value": b64("bad"), "partition": 9}, {"value": b64("ok"), "partition": 1}]
    response = produce(client, topic_name, records)
    assert response.status_code == 200, response.text
    bad, good = response.json()["offsets"]
    assert bad["offset"] is None and bad["error_code"] is not None and "9" in bad["error"]
    assert (good["partition"], good["offset"]) == (1, 0)


# ---- limits (small-limits gateway) --------------------------------------------------------


def _big_body(size: int) -> bytes:
    return b'{"records": [{"value": "' + b"A" * size + b'"}]}'


def test_body_over_limit_with_content_length_is_413(small_client, topic_name):
    """A body over LAKELOG_REQUEST_BYTES_MAX (Content-Length) is 413; nothing is written."""
    create_topic(small_client, topic_name)
    response = small_client.post(
        f"/topics/{topic_name}",
        content=_big_body(REQUEST_BYTES_MAX + 4),
        headers={"Content-Type": BINARY_V2},
    )
    assert_error(response, 413, 413)
    offsets = small_client.get(f"/topics/{topic_name}/partitions/0/offsets").json()
    assert offsets["end_offset"] == 0


def test_body_over_limit_chunked_is_413(small_client, topic_name):
    """A chunked body over the limit is 413 too (counted as it arrives)."""
    create_topic(small_client, topic_name)

    def chunks():
        yield b'{"records": [{"value": "'
        for _ in range(20):
            yield b"A" * 8000
        yield b'"}]}'

    response = small_client.post(
        f"/topics/{topic_name}", content=chunks(), headers={"Content-Type": BINARY_V2}
    )
    assert_error(response, 413, 413)


def test_413_is_answered_from_content_length_before_the_body(small_gateway, topic_name):
    """The 413 is sent from the header alone: the client need not send the 10 MB body."""
    with httpx.Client(base_url=small_gateway.url) as http:
        create_topic(http, topic_name)
    host, port = small_gateway.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(
            f"POST /topics/{topic_name} HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: {BINARY_V2}\r\nContent-Length: 10000000\r\n\r\n".encode()
            + b'{"records": ['
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 413")


def test_gateway_healthy_after_413(small_client, topic_name):
    """After oversized requests the same gateway still produces and fetches normally."""
    create_topic(small_client, topic_name)
    for _ in range(3):
        response = small_client.post(
            f"/topics/{topic_name}",
            content=_big_body(REQUEST_BYTES_MAX * 2),
            headers={"Content-Type": BINARY_V2},
        )
        assert response.status_code == 413
    body_at_limit = REQUEST_BYTES_MAX - 200
    response = small_client.post(
        f"/topics/{topic_name}",
        content=_big_body(body_at_limit - body_at_limit % 4),
        headers={"Content-Type": BINARY_V2},
    )
    assert response.status_code == 200, response.text
    assert len(_fetch_all(small_client, topic_name)) == 1


def test_too_many_records_is_422_42208(small_client, topic_name):
    """More records than LAKELOG_RECORDS_PER_REQUEST_MAX is 422 42208; the limit itself is ok."""
    create_topic(small_client, topic_name)
    ok = produce(small_client, topic_name, [{"value": None}] * RECORDS_PER_REQUEST_MAX)
    assert ok.status_code == 200
    too_many = [{"value": None}] * (RECORDS_PER_REQUEST_MAX + 1)
    body = assert_error(produce(small_client, topic_name, too_many), 422, 42208)
    assert str(RECORDS_PER_REQUEST_MAX) in body["message"]
    offsets = small_client.get(f"/topics/{topic_name}/partitions/0/offsets").json()
    assert offsets["end_offset"] == RECORDS_PER_REQUEST_MAX


def _oversized_topic_body(chunked: bool):
    padding = b"A" * (REQUEST_BYTES_MAX + 1)
    body = b'{"topic_name": "never", "configs": [{"name": "x", "value": "' + padding + b'"}]}'
    return iter([body[i : i + 8000] for i in range(0, len(body), 8000)]) if chunked else body


def test_v3_admin_body_over_limit_with_content_length_is_413(small_client):
    """The body limit also guards the v3 admin routes (Content-Length declared)."""
    response = small_client.post(
        "/v3/clusters/lakelog/topics",
        content=_oversized_topic_body(chunked=False),
        headers={"Content-Type": "application/json"},
    )
    assert_error(response, 413, 413)


def test_v3_admin_body_over_limit_chunked_is_413(small_client):
    """A chunked body over the limit on a v3 admin route is 413, as on the produce routes."""
    response = small_client.post(
        "/v3/clusters/lakelog/topics",
        content=_oversized_topic_body(chunked=True),
        headers={"Content-Type": "application/json"},
    )
    assert_error(response, 413, 413)


def test_keyless_record_on_a_compacted_topic_fails_alone(client, topic_name):
    """Compaction keeps the latest record per key, so a record without one is refused (Kafka:
    INVALID_RECORD); the keyed records of the same request are written."""
    create_topic(client, topic_name, cleanup_policy="compact")
    records = [{"key": b64("k"), "value": b64("a")}, {"value": b64("no key")}]
    response = produce(client, topic_name, records)
    assert response.status_code == 200, response.text
    written, refused = response.json()["offsets"]
    assert (written["offset"], written["error_code"]) == (0, None)
    assert refused["offset"] is None and "give every record a key" in refused["error"]
    assert [unb64(r["value"]) for r in _fetch_all(client, topic_name)] == [b"a"]
