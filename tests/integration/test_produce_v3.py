"""v3 produce end to end: one record per request, streaming mode, errors and timestamps."""

from __future__ import annotations

import json
import socket
import time
from datetime import datetime

import httpx
import pytest

from tests.integration.helpers import (
    V3,
    assert_error,
    b64,
    create_topic,
    fetch,
    gateway_with,
    unb64,
)

pytestmark = pytest.mark.gateway

REQUEST_BYTES_MAX = 64 * 1024
STREAM_RECORD_BYTES_MAX = 4096


@pytest.fixture(scope="module")
def small_gateway(tmp_path_factory):
    """A gateway with a 64 KiB body limit and 4 KiB per streamed record."""
    env = {
        "LAKELOG_REQUEST_BYTES_MAX": str(REQUEST_BYTES_MAX),
        "LAKELOG_STREAM_RECORD_BYTES_MAX": str(STREAM_RECORD_BYTES_MAX),
    }
    with gateway_with(tmp_path_factory, "small-v3", env) as process:
        yield process


@pytest.fixture(scope="module")
def shared_topic(gateway):
    """A 2-partition topic for the error cases, which must never write to it."""
    with httpx.Client(base_url=gateway.url, timeout=30.0) as http:
        create_topic(http, "produce-v3-shared", 2)
    yield "produce-v3-shared"
    with httpx.Client(base_url=gateway.url, timeout=30.0) as http:
        assert _fetch_all(http, "produce-v3-shared", 0) == []
        assert _fetch_all(http, "produce-v3-shared", 1) == []


def _records_url(topic: str) -> str:
    return f"{V3}/topics/{topic}/records"


def _post_one(client, topic, record: dict) -> httpx.Response:
    """A single record with Content-Length (non-streaming mode)."""
    return client.post(_records_url(topic), json=record)


def _stream(client, topic, chunks) -> list[dict]:
    """Send `chunks` as one chunked body (streaming mode); the reports, split at CRLF."""
    response = client.post(_records_url(topic), content=iter(chunks))
    assert response.status_code == 200, response.text
    assert response.text.endswith("\r\n")
    return [json.loads(line) for line in response.text.split("\r\n")[:-1]]


def _fetch_all(client, topic, partition=0) -> list[dict]:
    response = fetch(client, topic, partition, 0, max_bytes=64 * 1024 * 1024)
    assert response.status_code == 200, response.text
    return response.json()


def _ms(iso: str) -> int:
    return round(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def _string_record(text: str) -> bytes:
    return json.dumps({"value": {"type": "STRING", "data": text}}).encode()


# ---- one record ---------------------------------------------------------------------------


def test_single_record_report_and_data_round_trip(client, topic_name):
    """BINARY key, JSON value, headers and an ISO timestamp: report shape and stored record."""
    create_topic(client, topic_name, 2)
    record = {
        "partition_id": 1,
        "headers": [
            {"name": "Header-1", "value": b64("Header-1")},
            {"name": "Header-1", "value": b64(b"\x00\xff")},
            {"name": "no-value", "value": None},
        ],
        "key": {"type": "BINARY", "data": b64(b"foo\x00bar")},
        "value": {"type": "JSON", "data": {"foo": "bar", "n": [1, 2]}},
        "timestamp": "2021-02-05T19:14:42.123Z",
    }
    response = _post_one(client, topic_name, record)
    assert response.status_code == 200, response.text
    report = response.json()
    assert report == {
        "error_code": 200,
        "cluster_id": "lakelog",
        "topic_name": topic_name,
        "partition_id": 1,
        "offset": 0,
        "timestamp": report["timestamp"],
        "key": {"type": "BINARY", "size": 7},
        "value": {"type": "JSON", "size": len(b'{"foo":"bar","n":[1,2]}')},
    }
    assert _ms(report["timestamp"]) == _ms("2021-02-05T19:14:42.123Z")
    (stored,) = _fetch_all(client, topic_name, 1)
    assert unb64(stored["key"]) == b"foo\x00bar"
    assert json.loads(unb64(stored["value"])) == {"foo": "bar", "n": [1, 2]}
    assert stored["timestamp"] == _ms("2021-02-05T19:14:42.123Z")
    assert stored["timestamp_type"] == "CreateTime"
    assert stored["headers"] == [
        {"key": "Header-1", "value": b64("Header-1")},
        {"key": "Header-1", "value": b64(b"\x00\xff")},
        {"key": "no-value", "value": None},
    ]


def test_string_and_json_types_store_utf8_and_json_text(client, topic_name):
    """STRING data is stored as UTF-8 (size in bytes); JSON data as its JSON text."""
    create_topic(client, topic_name)
    record = {"key": {"type": "JSON", "data": [1, "a"]}, "value": {"type": "STRING", "data": "h€y"}}
    report = _post_one(client, topic_name, record).json()
    assert report["key"] == {"type": "JSON", "size": len(b'[1,"a"]')}
    assert report["value"] == {"type": "STRING", "size": len("h€y".encode())}
    (stored,) = _fetch_all(client, topic_name)
    assert unb64(stored["key"]) == b'[1,"a"]'
    assert unb64(stored["value"]) == "h€y".encode()
    assert "headers" not in stored


def test_type_defaults_to_json(client, topic_name):
    """A key/value without `type` is treated as JSON."""
    create_topic(client, topic_name)
    report = _post_one(client, topic_name, {"value": {"data": {"a": 1}}}).json()
    assert report["value"] == {"type": "JSON", "size": 7}
    assert unb64(_fetch_all(client, topic_name)[0]["value"]) == b'{"a":1}'


def test_missing_key_and_value_mean_null_key_and_tombstone(client, topic_name):
    """No key gives a null key; no value gives a tombstone (null value)."""
    create_topic(client, topic_name)
    key_only = _post_one(client, topic_name, {"key": {"type": "STRING", "data": "k"}}).json()
    assert key_only["key"] == {"type": "STRING", "size": 1} and key_only["value"] is None
    value_only = _post_one(client, topic_name, {"value": {"type": "STRING", "data": "v"}}).json()
    assert value_only["key"] is None
    first, second = _fetch_all(client, topic_name)
    assert (unb64(first["key"]), first["value"]) == (b"k", None)
    assert (second["key"], unb64(second["value"])) == (None, b"v")


def test_default_timestamp_is_now(client, topic_name):
    """Without a timestamp the record gets the append time, reported and stored alike."""
    create_topic(client, topic_name)
    before = time.time() * 1000
    report = _post_one(client, topic_name, {"value": {"type": "STRING", "data": "x"}}).json()
    after = time.time() * 1000
    assert before - 1000 <= _ms(report["timestamp"]) <= after + 1000
    assert _fetch_all(client, topic_name)[0]["timestamp"] == _ms(report["timestamp"])


def test_log_append_time_topic_ignores_producer_timestamp(client, topic_name):
    """On a LogAppendTime topic the producer's timestamp is replaced by the append time."""
    create_topic(client, topic_name, message_timestamp_type="LogAppendTime")
    record = {"value": {"type": "STRING", "data": "x"}, "timestamp": "2001-01-01T00:00:00Z"}
    before = time.time() * 1000
    report = _post_one(client, topic_name, record).json()
    assert _ms(report["timestamp"]) >= before - 1000
    (stored,) = _fetch_all(client, topic_name)
    assert stored["timestamp_type"] == "LogAppendTime"
    assert stored["timestamp"] == _ms(report["timestamp"])


# ---- errors (non-streaming) ---------------------------------------------------------------


def test_unknown_topic_is_404_40403(client, topic_name):
    """Producing to a missing topic is 404 40403 (v3's UnknownTopicOrPartition)."""
    response = _post_one(client, topic_name, {"value": {"type": "STRING", "data": "x"}})
    assert_error(response, 404, 40403)


def test_unknown_cluster_is_404(client, topic_name):
    """Producing under another cluster id is 404."""
    create_topic(client, topic_name)
    response = client.post(f"/v3/clusters/other/topics/{topic_name}/records", json={})
    assert_error(response, 404, 404)


def test_empty_body_is_422_42206(client, shared_topic):
    """An empty body (Content-Length: 0) or only whitespace is 422 42206."""
    for body in (b"", b" \r\n "):
        response = client.post(
            _records_url(shared_topic), content=body, headers={"Content-Type": "application/json"}
        )
        assert_error(response, 422, 42206)


@pytest.mark.parametrize(
    ("record", "status", "code"),
    [
        ({"partition_id": 5}, 404, 40403),
        ({"partition_id": "0"}, 400, 400),
        ({"value": {"type": "BINARY", "data": "not base64!"}}, 400, 400),
        ({"value": {"type": "CBOR", "data": 1}}, 400, 400),
        ({"value": {"type": "AVRO", "data": 1}}, 422, 42205),  # no schema for the subject
        ({"value": {"type": "STRING", "data": 5}}, 400, 400),
        ({"value": "plain"}, 400, 400),
        ({"headers": [{"name": "h", "value": "!!"}]}, 400, 400),
        ({"headers": {"h": "aGk="}}, 400, 400),
        ({"timestamp": "yesterday"}, 422, 422),
    ],
)
def test_bad_single_record(client, shared_topic, record, status, code):
    """A bad record is answered with its own status and Confluent code; nothing is written."""
    assert_error(_post_one(client, shared_topic, record), status, code)


def test_invalid_json_body_is_400(client, shared_topic):
    """A body that is not JSON is 400."""
    response = client.post(
        _records_url(shared_topic),
        content=b'{"value": }',
        headers={"Content-Type": "application/json"},
    )
    assert_error(response, 400, 400)


def test_oversized_record_is_413(client, topic_name):
    """A record over the topic's max.message.bytes is 413 (v3)."""
    create_topic(client, topic_name, max_message_bytes=10)
    response = _post_one(client, topic_name, {"value": {"type": "STRING", "data": "x" * 11}})
    assert_error(response, 413, 413)


def test_concatenated_records_with_content_length_get_one_report_each(client, topic_name):
    """Several records in one Content-Length body get CRLF-separated reports, in order."""
    create_topic(client, topic_name)
    body = b"".join(_string_record(f"r{i}") for i in range(3))
    response = client.post(
        _records_url(topic_name), content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 200
    reports = [json.loads(line) for line in response.text.split("\r\n") if line]
    assert [r["offset"] for r in reports] == [0, 1, 2]


# ---- streaming ------------------------------------------------------------------------------


def test_streaming_many_records_one_report_each_in_order(client, topic_name):
    """300 records over one chunked connection: 300 reports in order, offsets 0..299."""
    create_topic(client, topic_name)
    chunks = [_string_record(f"value-{i}") + (b"\n" if i % 2 else b" ") for i in range(300)]
    reports = _stream(client, topic_name, chunks)
    assert [r["error_code"] for r in reports] == [200] * 300
    assert [r["offset"] for r in reports] == list(range(300))
    assert [r["value"]["size"] for r in reports] == [len(f"value-{i}") for i in range(300)]
    values = [unb64(r["value"]) for r in _fetch_all(client, topic_name)]
    assert values == [f"value-{i}".encode() for i in range(300)]


def test_streaming_record_split_across_chunks(client, topic_name):
    """Records split at arbitrary byte boundaries (even inside strings) are reassembled."""
    create_topic(client, topic_name)
    body = b"".join(_string_record(text) for text in ('a"}{b', "c\\d", "{[e]}"))
    chunks = [body[i : i + 7] for i in range(0, len(body), 7)]
    reports = _stream(client, topic_name, chunks)
    assert [r["offset"] for r in reports] == [0, 1, 2]
    values = [unb64(r["value"]) for r in _fetch_all(client, topic_name)]
    assert values == [b'a"}{b', b"c\\d", b"{[e]}"]


def test_streaming_bad_records_get_own_error_reports(client, topic_name):
    """Bad base64, an unknown partition and invalid JSON fail alone; the rest are written."""
    create_topic(client, topic_name, 2)
    chunks = [
        _string_record("first"),
        b'{"value": {"type": "BINARY", "data": "%%%"}}',
        b'{"partition_id": 7, "value": {"type": "STRING", "data": "x"}}',
        b'{"value": {"type": "JSON", "data": }}',
        b"[1, 2]",
        b'{"partition_id": 0, "value": {"type": "STRING", "data": "last"}}',
    ]
    reports = _stream(client, topic_name, chunks)
    assert [r["error_code"] for r in reports] == [200, 400, 40403, 400, 400, 200]
    assert all(r["message"] for r in reports[1:5])
    stored = {
        (record["partition"], record["offset"]): unb64(record["value"])
        for partition in (0, 1)
        for record in _fetch_all(client, topic_name, partition)
    }
    assert stored == {
        (reports[0]["partition_id"], reports[0]["offset"]): b"first",
        (0, reports[-1]["offset"]): b"last",
    }


def test_streaming_scalar_records_get_one_error_each(client, topic_name):
    """Top-level scalars (numbers, literals) are not records: one 400 report each."""
    create_topic(client, topic_name)
    chunks = [b"123 true null", _string_record("ok")]
    assert [r["error_code"] for r in _stream(client, topic_name, chunks)] == [400, 400, 400, 200]


def test_streaming_string_record_gets_exactly_one_report(client, topic_name):
    """A top-level JSON string containing spaces is one bad record with one error report."""
    create_topic(client, topic_name)
    chunks = [_string_record("a"), b' "not an object" ', _string_record("b")]
    assert [r["error_code"] for r in _stream(client, topic_name, chunks)] == [200, 400, 200]


def test_streaming_truncated_last_record_is_reported(client, topic_name):
    """A stream that ends inside a record gets an error report after the good ones."""
    create_topic(client, topic_name)
    reports = _stream(client, topic_name, [_string_record("ok"), b'{"value": {"type"'])
    assert [r["error_code"] for r in reports] == [200, 400]


def test_streaming_to_unknown_topic_is_404_40403(client, topic_name):
    """A stream to a missing topic is refused up front with 404 40403."""
    response = client.post(_records_url(topic_name), content=iter([_string_record("x")]))
    assert_error(response, 404, 40403)


# ---- limits (small-limits gateway) --------------------------------------------------------


def _raw_request(gateway, head: str, body: bytes, wait_for: bytes, timeout: float) -> bytes:
    """Send a raw HTTP request (the body possibly incomplete); read until `wait_for` appears."""
    host, port = gateway.url.removeprefix("http://").split(":")
    received = b""
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(head.encode() + body)
        deadline = time.monotonic() + timeout
        while wait_for not in received and time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break
            if not data:
                break
            received += data
    return received


def test_streamed_record_over_limit_closes_stream_with_413(small_gateway, topic_name):
    """A streamed record whose buffered part exceeds the per-record limit gets a 413 report."""
    with httpx.Client(base_url=small_gateway.url, timeout=30.0) as http:
        create_topic(http, topic_name)
    first = _string_record("ok")
    partial = b'{"value": {"type": "STRING", "data": "' + b"x" * (2 * STREAM_RECORD_BYTES_MAX)
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (first, partial))
    head = (
        f"POST {_records_url(topic_name)} HTTP/1.1\r\nHost: x\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    received = _raw_request(small_gateway, head, body, b'"error_code":413', timeout=10)
    assert received.startswith(b"HTTP/1.1 200")
    assert b'"error_code":200' in received and b'"error_code":413' in received


def test_streamed_record_over_limit_in_one_chunk_is_rejected(small_gateway, topic_name):
    """A streamed record over the per-record limit is rejected however the bytes arrive."""
    with httpx.Client(base_url=small_gateway.url, timeout=30.0) as http:
        create_topic(http, topic_name)
        big = _string_record("x" * (2 * STREAM_RECORD_BYTES_MAX))
        reports = _stream(http, topic_name, [big])
    assert reports[0]["error_code"] == 413


def test_content_length_body_over_limit_is_413(small_gateway, topic_name):
    """Concatenated records with a Content-Length over LAKELOG_REQUEST_BYTES_MAX are 413."""
    with httpx.Client(base_url=small_gateway.url, timeout=30.0) as http:
        create_topic(http, topic_name)
        body = _string_record("x" * 1000) * (REQUEST_BYTES_MAX // 1000 + 1)
        response = http.post(
            _records_url(topic_name), content=body, headers={"Content-Type": "application/json"}
        )
        assert_error(response, 413, 413)
        assert _fetch_all(http, topic_name) == []


def test_content_length_over_limit_is_refused_before_the_body(small_gateway, topic_name):
    """A declared Content-Length over the limit is answered 413 without waiting for the body."""
    with httpx.Client(base_url=small_gateway.url, timeout=30.0) as http:
        create_topic(http, topic_name)
    head = (
        f"POST {_records_url(topic_name)} HTTP/1.1\r\nHost: x\r\n"
        "Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n"
    )
    received = _raw_request(small_gateway, head, b'{"value": ', b"\r\n\r\n", timeout=1.5)
    assert received.startswith(b"HTTP/1.1 413")
