"""A partition holding committed, aborted and open transactions (FORMAT.md §14), read by
librdkafka (confluent-kafka) over the Kafka protocol: read_committed sees plain and committed
records up to the open transaction, read_uncommitted every record, and neither sees markers.

The transactions are written into the table before the gateway starts (the transaction
coordinator that writes them over Kafka's APIs is the next step of issue 16)."""

from __future__ import annotations

import time

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition

from storage_layout.catalog import TopicCatalog
from storage_layout.log import DeltaPartitionLog
from storage_layout.paths import partition_table_uri
from storage_layout.records import NewRecord
from storage_layout.schema import CONTROL_ABORT, CONTROL_COMMIT
from storage_layout.topic_config import TopicConfig
from tests.gateway_process import start_gateway

pytestmark = pytest.mark.gateway

TOPIC = "transactions"
CONFIG = TopicConfig()
POLL_DEADLINE_S = 20


def write_transactions(root: str) -> None:
    """0 plain | 1-2 producer 1 | 3 producer 2 | 4 ABORT 2 | 5 COMMIT 1 | 6 plain | 7 producer
    3, open."""
    TopicCatalog(root).create_topic(TOPIC, 1, CONFIG)
    log = DeltaPartitionLog.open(partition_table_uri(root, TOPIC, 0))

    def txn(producer: int, *names: str) -> None:
        producers = [(producer, 0, i, True) for i in range(len(names))]
        records = [NewRecord(None, name.encode()) for name in names]
        log.append(records, config=CONFIG, producers=producers)

    log.append([NewRecord(None, b"plain-0")], config=CONFIG)
    txn(1, "committed-1", "committed-2")
    txn(2, "aborted-3")
    log.append_marker(2, 0, CONTROL_ABORT, config=CONFIG)
    log.append_marker(1, 0, CONTROL_COMMIT, config=CONFIG)
    log.append([NewRecord(None, b"plain-6")], config=CONFIG)
    txn(3, "open-7")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("txn-reads") / "data"
    data_dir.mkdir()
    write_transactions(str(data_dir))
    process = start_gateway(data_dir, kafka=True)
    yield process
    process.stop()


def read_all(bootstrap: str, isolation: str, expected: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    seen, deadline = [], time.monotonic() + POLL_DEADLINE_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append((message.offset(), message.value()))
            elif message is None and len(seen) >= expected:
                break
    finally:
        consumer.close()
    return seen


def test_read_committed_skips_aborted_records_and_stops_at_the_open_transaction(gateway):
    assert read_all(gateway.kafka_address, "read_committed", 4) == [
        (0, b"plain-0"),
        (1, b"committed-1"),
        (2, b"committed-2"),
        (6, b"plain-6"),
    ]


def test_read_uncommitted_sees_every_record_and_no_marker(gateway):
    assert read_all(gateway.kafka_address, "read_uncommitted", 6) == [
        (0, b"plain-0"),
        (1, b"committed-1"),
        (2, b"committed-2"),
        (3, b"aborted-3"),
        (6, b"plain-6"),
        (7, b"open-7"),
    ]


def test_the_http_api_shows_no_marker(gateway):
    response = httpx.get(
        f"{gateway.url}/topics/{TOPIC}/partitions/0/records", params={"offset": 0}, timeout=30
    )
    assert response.status_code == 200, response.text
    assert [record["offset"] for record in response.json()] == [0, 1, 2, 3, 6, 7]
