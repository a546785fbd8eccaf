"""Stateless fetch end to end: formats, record shape, max_bytes, offsets, long-poll, paging."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

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

TAIL_RECORDS_MAX = 500
FETCH_RECORDS_MAX = 700


@pytest.fixture(scope="module")
def small_tail_gateway(tmp_path_factory):
    """A gateway keeping only ~500 records in memory, so older reads come from Parquet files."""
    env = {
        "LAKELOG_TAIL_RECORDS_MAX": str(TAIL_RECORDS_MAX),
        "LAKELOG_FETCH_RECORDS_MAX": str(FETCH_RECORDS_MAX),
    }
    with gateway_with(tmp_path_factory, "small-tail", env) as process:
        yield process


@pytest.fixture(scope="module")
def three_records(gateway):
    """A topic with a keyed record with headers, a keyless one and a tombstone."""
    name = "fetch-three-records"
    with httpx.Client(base_url=gateway.url, timeout=30.0) as http:
        create_topic(http, name)
        records = [
            {"key": b64('"k"'), "value": b64('{"a":1}'), "timestamp": 1_600_000_000_000},
            {"value": b64("[1,2]"), "headers": [{"key": "h", "value": b64("v")}]},
            {"key": b64("7"), "value": None},
        ]
        assert produce(http, name, records).status_code == 200
    return name


# ---- formats and record shape -------------------------------------------------------------


@pytest.mark.parametrize(
    "accept",
    [None, "*/*", "application/*", "application/json", "application/vnd.kafka.v2+json", BINARY_V2],
)
def test_binary_is_the_default_format(client, three_records, accept):
    """Without a specific format records come base64-encoded as binary.v2."""
    request = client.build_request(
        "GET", f"/topics/{three_records}/partitions/0/records", params={"offset": 0}
    )
    if accept is None:
        del request.headers["Accept"]
    else:
        request.headers["Accept"] = accept
    response = client.send(request)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(BINARY_V2)
    assert [unb64(r["value"]) for r in response.json()] == [b'{"a":1}', b"[1,2]", None]


def test_json_format_embeds_values_as_json(client, three_records):
    """Accept json.v2 returns keys and values as JSON values."""
    response = fetch(client, three_records, accept=JSON_V2)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(JSON_V2)
    assert [(r["key"], r["value"]) for r in response.json()] == [
        ("k", {"a": 1}),
        (None, [1, 2]),
        (7, None),
    ]


def test_json_format_on_non_json_bytes_is_422(client, topic_name):
    """A record that is not JSON cannot be served as json.v2: 422 42207."""
    create_topic(client, topic_name)
    produce(client, topic_name, [{"value": b64(b"\xffnot json")}])
    assert_error(fetch(client, topic_name, accept=JSON_V2), 422, 42207)


@pytest.mark.parametrize(
    "accept", ["text/plain", "application/vnd.kafka.cbor.v2+json", "application/xml"]
)
def test_unsupported_accept_is_406_40601(client, three_records, accept):
    """An Accept the gateway cannot produce is 406 40601."""
    assert_error(fetch(client, three_records, accept=accept), 406, 40601)


def test_record_fields_and_headers_only_when_present(client, three_records):
    """Records have topic/key/value/partition/offset/timestamp/timestamp_type, headers if any."""
    first, second, third = fetch(client, three_records).json()
    assert first == {
        "topic": three_records,
        "key": b64('"k"'),
        "value": b64('{"a":1}'),
        "partition": 0,
        "offset": 0,
        "timestamp": 1_600_000_000_000,
        "timestamp_type": "CreateTime",
    }
    assert second["headers"] == [{"key": "h", "value": b64("v")}]
    assert second["key"] is None and second["timestamp"] > 1_600_000_000_000
    assert "headers" not in third and third["value"] is None
    assert [r["offset"] for r in (first, second, third)] == [0, 1, 2]


def test_fetch_from_middle_offset(client, three_records):
    """Fetching from offset 1 starts at that record."""
    assert [r["offset"] for r in fetch(client, three_records, 0, 1).json()] == [1, 2]


# ---- max_bytes ---------------------------------------------------------------------------


def test_max_bytes_limits_but_returns_at_least_one(client, topic_name):
    """max_bytes caps key+value bytes per response, yet one oversized record still comes back."""
    create_topic(client, topic_name)
    produce(client, topic_name, [{"value": b64(b"x" * 100)} for _ in range(10)])
    assert len(fetch(client, topic_name, max_bytes=250).json()) == 2
    assert len(fetch(client, topic_name, max_bytes=300).json()) == 3
    assert len(fetch(client, topic_name, max_bytes=1).json()) == 1
    assert len(fetch(client, topic_name, max_bytes=10_000).json()) == 10


# ---- offsets ------------------------------------------------------------------------------


def test_offset_above_high_watermark_is_416_with_bounds(client, three_records):
    """An offset beyond the high watermark is 416 41601 naming both bounds."""
    body = assert_error(fetch(client, three_records, 0, 4), 416, 41601)
    assert "0" in body["message"] and "3" in body["message"]


def test_offset_above_high_watermark_is_416_even_with_timeout(client, three_records):
    """The 416 comes at once, not after the long-poll timeout."""
    started = time.monotonic()
    assert_error(fetch(client, three_records, 0, 100, timeout=5000), 416, 41601)
    assert time.monotonic() - started < 2


def test_offset_at_high_watermark_without_timeout_is_empty_and_fast(client, three_records):
    """offset == high watermark with timeout=0 returns [] immediately."""
    started = time.monotonic()
    response = fetch(client, three_records, 0, 3, timeout=0)
    assert response.status_code == 200 and response.json() == []
    assert time.monotonic() - started < 1


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"offset": -1},
        {"offset": "abc"},
        {"offset": 0, "max_bytes": 0},
        {"offset": 0, "timeout": -1},
    ],
)
def test_bad_query_parameters_are_422(client, three_records, params):
    """A missing or negative offset, max_bytes=0 or a negative timeout is 422."""
    response = client.get(f"/topics/{three_records}/partitions/0/records", params=params)
    assert_error(response, 422, 422)


def test_unknown_topic_and_partition(client, three_records, topic_name):
    """Fetching a missing topic is 404 40401; a missing partition is 404 40402."""
    assert_error(fetch(client, topic_name), 404, 40401)
    assert_error(fetch(client, three_records, 1), 404, 40402)


# ---- long-poll ----------------------------------------------------------------------------


def _produce_later(url: str, topic: str, value: str, *, delay: float, partition: int):
    """A started thread that produces one record after `delay` seconds (own HTTP client)."""

    def run() -> None:
        time.sleep(delay)
        with httpx.Client(base_url=url, timeout=30.0) as http:
            produce(http, topic, [{"value": b64(value)}], partition=partition)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_long_poll_returns_soon_after_a_record_arrives(client, gateway, topic_name):
    """A fetch waiting at the end returns the record produced meanwhile, long before timeout."""
    create_topic(client, topic_name)
    started = time.monotonic()
    producer = _produce_later(gateway.url, topic_name, "late", delay=0.5, partition=0)
    response = fetch(client, topic_name, 0, 0, timeout=5000)
    elapsed = time.monotonic() - started
    producer.join()
    assert response.status_code == 200, response.text
    assert [unb64(r["value"]) for r in response.json()] == [b"late"]
    assert 0.4 < elapsed < 4.0


def test_long_poll_without_data_waits_for_the_timeout(client, gateway, topic_name):
    """With no new data (a write to another partition does not count) [] comes after ~timeout."""
    create_topic(client, topic_name, 2)
    produce(client, topic_name, [{"value": b64("old")}], partition=0)
    started = time.monotonic()
    producer = _produce_later(gateway.url, topic_name, "p1", delay=0.2, partition=1)
    response = fetch(client, topic_name, 0, 1, timeout=1000)
    elapsed = time.monotonic() - started
    producer.join()
    assert response.status_code == 200 and response.json() == []
    assert 0.9 <= elapsed < 3.0


# ---- paging across Parquet files and the in-memory tail -----------------------------------


def test_paging_3000_records_returns_each_once_in_order(small_tail_gateway, topic_name):
    """Pages of max_bytes from offset 0 cover 3000 records exactly once (files, then tail)."""
    value_size, per_request, total = 100, 500, 3000
    with httpx.Client(base_url=small_tail_gateway.url, timeout=30.0) as http:
        create_topic(http, topic_name)
        for start in range(0, total, per_request):
            values = [b"%0100d" % i for i in range(start, start + per_request)]
            response = produce(http, topic_name, [{"value": b64(v)} for v in values])
            assert response.status_code == 200
        offset, seen, page_sizes = 0, [], []
        while offset < total:
            # 13 records a page: pages straddle file boundaries and the files/tail boundary
            page = fetch(http, topic_name, 0, offset, max_bytes=13 * value_size + 50).json()
            assert page, f"empty page at offset {offset}"
            seen.extend(page)
            page_sizes.append(len(page))
            offset = page[-1]["offset"] + 1
        assert fetch(http, topic_name, 0, total).json() == []
    assert [r["offset"] for r in seen] == list(range(total))
    assert [unb64(r["value"]) for r in seen] == [b"%0100d" % i for i in range(total)]
    assert set(page_sizes[:-1]) == {13} and page_sizes[-1] == total % 13


def test_large_pages_are_capped_by_fetch_records_max(small_tail_gateway, topic_name):
    """Without a byte limit pages hold at most LAKELOG_FETCH_RECORDS_MAX records, in order."""
    total = 2000
    with httpx.Client(base_url=small_tail_gateway.url, timeout=30.0) as http:
        create_topic(http, topic_name)
        for start in range(0, total, 400):
            records = [{"value": b64(str(i))} for i in range(start, start + 400)]
            assert produce(http, topic_name, records).status_code == 200
        offset, values = 0, []
        while offset < total:
            page = fetch(http, topic_name, 0, offset, max_bytes=64 * 1024 * 1024).json()
            assert 0 < len(page) <= FETCH_RECORDS_MAX
            values.extend(int(unb64(r["value"])) for r in page)
            offset = page[-1]["offset"] + 1
    assert values == list(range(total))
