"""Record validation (issue 3 item 5): header count and key size caps, header keys, and error
messages that name the bad record."""

from __future__ import annotations

import pytest

from tests.integration.helpers import BINARY_V2, V3, assert_error, b64, create_topic, produce

pytestmark = pytest.mark.gateway

HEADERS_MAX = 64  # LAKELOG_HEADERS_PER_RECORD_MAX default
KEY_BYTES_MAX = 64 * 1024  # LAKELOG_KEY_BYTES_MAX default


@pytest.fixture(scope="module")
def topic(gateway):
    import httpx

    with httpx.Client(base_url=gateway.url, timeout=30.0) as http:
        create_topic(http, "validation-topic")
    return "validation-topic"


def v2_headers(count: int) -> list[dict]:
    return [{"key": f"h{i}", "value": b64("v")} for i in range(count)]


def test_v2_headers_at_the_cap_are_accepted(client, topic):
    """A record with exactly the allowed number of headers is written."""
    assert produce(
        client, topic, [{"value": b64("v"), "headers": v2_headers(HEADERS_MAX)}]
    ).is_success


def test_v2_too_many_headers_is_422_naming_the_record(client, topic):
    """One header over the cap is 422 42210 and the message names the record index."""
    records = [{"value": b64("ok")}, {"value": b64("v"), "headers": v2_headers(HEADERS_MAX + 1)}]
    body = assert_error(produce(client, topic, records), 422, 42210)
    assert "Record 1" in body["message"]


def test_v3_too_many_headers_is_422(client, topic):
    """The v3 record route applies the same header cap."""
    headers = [{"name": f"h{i}", "value": None} for i in range(HEADERS_MAX + 1)]
    response = client.post(f"{V3}/topics/{topic}/records", json={"headers": headers})
    assert_error(response, 422, 42210)


def test_v2_key_over_the_cap_is_422_naming_the_record(client, topic):
    """A key above LAKELOG_KEY_BYTES_MAX is 422 42211 with the record index; at the cap it is
    accepted."""
    at_cap = [{"key": b64(b"k" * KEY_BYTES_MAX), "value": b64("v")}]
    assert produce(client, topic, at_cap).is_success
    over = [{"value": b64("v")}, {"key": b64(b"k" * (KEY_BYTES_MAX + 1)), "value": b64("v")}]
    body = assert_error(produce(client, topic, over), 422, 42211)
    assert "Record 1" in body["message"]


def test_v3_key_over_the_cap_is_422(client, topic):
    """The v3 record route applies the same key cap."""
    record = {"key": {"type": "STRING", "data": "k" * (KEY_BYTES_MAX + 1)}}
    assert_error(client.post(f"{V3}/topics/{topic}/records", json=record), 422, 42211)


def test_empty_header_key_is_allowed_as_in_kafka(client, topic):
    """Kafka requires a non-null header key string; the empty string is valid."""
    assert produce(client, topic, [{"value": b64("v"), "headers": [{"key": "", "value": None}]}])
    response = produce(client, topic, [{"value": b64("v"), "headers": [{"key": ""}]}])
    assert response.status_code == 200, response.text


def test_null_header_key_is_400(client, topic):
    """A null header key is refused on v2 and v3."""
    records = [{"value": b64("v"), "headers": [{"key": None, "value": None}]}]
    assert_error(produce(client, topic, records), 400, 400)
    v3 = client.post(f"{V3}/topics/{topic}/records", json={"headers": [{"name": None}]})
    assert_error(v3, 400, 400)


def test_header_key_that_is_not_utf8_is_400(client, topic):
    """A header key with a lone surrogate (not encodable as UTF-8) is malformed JSON: 400."""
    body = b'{"records": [{"value": "eA==", "headers": [{"key": "\\ud800", "value": null}]}]}'
    response = client.post(f"/topics/{topic}", content=body, headers={"Content-Type": BINARY_V2})
    assert_error(response, 400, 400)
    v3 = b'{"headers": [{"name": "\\udc00", "value": null}]}'
    response = client.post(
        f"{V3}/topics/{topic}/records", content=v3, headers={"Content-Type": "application/json"}
    )
    assert_error(response, 400, 400)


def test_bad_base64_names_the_record_index(client, topic):
    """Bad base64 in the third record is reported as 'Record 2'."""
    records = [{"value": b64("a")}, {"value": b64("b")}, {"value": "%%%"}]
    body = assert_error(produce(client, topic, records), 400, 400)
    assert "Record 2" in body["message"] and "base64" in body["message"]


def test_bad_json_names_the_position(client, topic):
    """A syntax error in the body is 400 and gives the character position of the error."""
    body = b'{"records": [{"value": "eA=="}, {"value": }]}'
    response = client.post(f"/topics/{topic}", content=body, headers={"Content-Type": BINARY_V2})
    assert "char" in assert_error(response, 400, 400)["message"]
