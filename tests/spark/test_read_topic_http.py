"""Records produced over HTTP read back identical in Spark (the interop promise)."""

from __future__ import annotations

import base64
import datetime as dt

from chispa import assert_df_equality

from pipeline.kafka_schema import KAFKA_SCHEMA_WITH_HEADERS
from pipeline.read import read_topic
from tests.conftest import BINARY_V2, create_topic

BASE_MS = 1_700_000_000_000


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def produced_records() -> list[dict]:
    return [
        {"key": b64(b"user-1"), "value": b64(b"login"), "timestamp": BASE_MS, "partition": 0},
        {
            "key": None,
            "value": b64(b"\x00\xffbinary"),
            "timestamp": BASE_MS + 1,
            "partition": 1,
            "headers": [{"key": "trace", "value": b64(b"abc")}, {"key": "empty", "value": None}],
        },
        {"key": b64(b"user-1"), "value": None, "timestamp": BASE_MS + 2, "partition": 0},
    ]


def test_http_produced_records_read_back_identical(spark, client, gateway, topic_name):
    """Keys, values, tombstones, headers, timestamps and offsets survive HTTP -> Delta -> Spark."""
    create_topic(client, topic_name, partitions=2)
    response = client.post(
        f"/topics/{topic_name}",
        json={"records": produced_records()},
        headers={"Content-Type": BINARY_V2},
    )
    assert response.status_code == 200, response.text
    offsets = [(o["partition"], o["offset"]) for o in response.json()["offsets"]]
    assert offsets == [(0, 0), (1, 0), (0, 1)]

    actual = read_topic(spark, str(gateway.data_dir), topic_name, include_headers=True)
    expected = spark.createDataFrame(
        [
            (b"user-1", b"login", topic_name, 0, 0, _ts(BASE_MS), 0, None),
            (
                None,
                b"\x00\xffbinary",
                topic_name,
                1,
                0,
                _ts(BASE_MS + 1),
                0,
                [("trace", b"abc"), ("empty", None)],
            ),
            (b"user-1", None, topic_name, 0, 1, _ts(BASE_MS + 2), 0, None),
        ],
        KAFKA_SCHEMA_WITH_HEADERS,
    )
    assert_df_equality(actual, expected, ignore_row_order=True)


def _ts(epoch_ms: int) -> dt.datetime:
    # Spark turns aware datetimes into its session time zone (UTC in lakelog sessions).
    return dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC)
