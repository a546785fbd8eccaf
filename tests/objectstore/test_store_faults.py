"""Object-store faults during produce, injected by a proxy in front of a real S3 endpoint:
throttling (503 SlowDown) is retried inside the client with backoff; a commit whose answer was
lost is resolved by reading the log, never by writing twice; a commit that cannot be made is a
retriable error with nothing written. Every case checks the table holds each acknowledged
record exactly once."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from storage_layout.errors import StorageUnavailable
from storage_layout.log import DeltaPartitionLog
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig
from tests.faulty_proxy import Faults, FaultyProxy, Request


def is_commit(request: Request) -> bool:
    return (
        request.method == "PUT"
        and "/_delta_log/" in request.path
        and request.path.endswith(".json")
        and "if-none-match" in request.headers
    )


@pytest.fixture
def proxied(s3_server, monkeypatch):
    """A partition table in a new bucket, reached through the fault proxy."""
    proxy = FaultyProxy(s3_server.endpoint).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    uri = f"s3://{s3_server.create_bucket()}/lakelog/topics/t/0"
    DeltaPartitionLog.create(uri)
    yield proxy, uri
    proxy.stop()


def values(uri: str) -> list[bytes]:
    table = DeltaTable(uri).to_pyarrow_table(columns=["offset", "value"]).sort_by("offset")
    return table.column("value").to_pylist()


def append(log: DeltaPartitionLog, value: bytes) -> int:
    return log.append([NewRecord(None, value)], config=TopicConfig()).base_offset


@pytest.mark.parametrize(
    ("throttle", "lose"),
    [(2, 0), (0, 1), (0, 10), (1, 10)],
    ids=["throttled-twice", "answer-lost-once", "answer-lost-every-retry", "throttled-then-lost"],
)
def test_a_commit_through_faults_is_acknowledged_once(proxied, throttle, lose):
    proxy, uri = proxied
    log = DeltaPartitionLog.open(uri)
    assert append(log, b"before") == 0
    proxy.faults = Faults(matches=is_commit, throttle=throttle, lose=lose)
    assert append(log, b"through-faults") == 1
    assert proxy.faults.hits, "no fault was injected"
    proxy.faults = Faults(matches=is_commit)
    assert append(log, b"after") == 2
    assert values(uri) == [b"before", b"through-faults", b"after"]


def test_a_commit_the_store_keeps_refusing_is_retriable_and_writes_nothing(proxied):
    proxy, uri = proxied
    log = DeltaPartitionLog.open(uri)
    assert append(log, b"before") == 0
    proxy.faults = Faults(matches=is_commit, throttle=100)
    with pytest.raises(StorageUnavailable):
        append(log, b"refused")
    proxy.faults = Faults(matches=is_commit)
    assert append(log, b"retried") == 1  # the client's retry, once the store answers again
    assert values(uri) == [b"before", b"retried"]
