"""A transaction coordinator that died between PrepareCommit (or PrepareAbort) and the end of
its transaction: a new gateway on the same storage root finds the prepared state in
`_meta/transactions` and completes it (markers, and on commit the group's offsets), as
Kafka's coordinator completes a prepared transaction from its log after a failover."""

from __future__ import annotations

import time

import httpx
import pytest

from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.meta.transaction_state import (
    PendingOffset,
    TransactionStateStore,
    TxnState,
    TxnStatus,
)
from storage_layout.paths import partition_table_uri
from storage_layout.records import NewRecord, TopicPartition
from storage_layout.topic_config import TopicConfig
from tests.gateway_process import start_gateway
from tests.integration.helpers import V3

pytestmark = pytest.mark.gateway

TOPIC, GROUP = "recovered", "recovered-readers"
DEADLINE_S = 40


def prepared_transaction(root: str, transactional_id: str, producer: int, partition: int, status):
    """Two records of `producer` in `partition`, and the coordinator's state left at
    `status` (as a coordinator that died right after storing it leaves it)."""
    log = DeltaPartitionLog.open(partition_table_uri(root, TOPIC, partition))
    records = [NewRecord(None, f"{transactional_id}-{n}".encode()) for n in range(2)]
    log.append(records, config=TopicConfig(), producers=[(producer, 0, n, True) for n in range(2)])
    state = TxnState(
        transactional_id,
        producer,
        0,
        status,
        60_000,
        partitions=(TopicPartition(TOPIC, partition),),
        groups=(GROUP,),
        offsets=(PendingOffset(GROUP, "input", 0, 42),),
        started_ms=int(time.time() * 1000),
    )
    TransactionStateStore(root).save(state)


def values(client: httpx.Client, partition: int, isolation: str) -> list[int]:
    response = client.get(
        f"/topics/{TOPIC}/partitions/{partition}/records",
        params={"offset": 0, "isolation.level": isolation},
    )
    assert response.status_code == 200, response.text
    return [record["offset"] for record in response.json()]


def test_a_successor_completes_prepared_transactions_from_the_store(tmp_path):
    data_dir = tmp_path / "data"
    root = str(data_dir)
    TopicCatalog(root).create_topic(TOPIC, 2, TopicConfig())
    prepared_transaction(root, "died-committing", 501, 0, TxnStatus.PREPARE_COMMIT)
    prepared_transaction(root, "died-aborting", 502, 1, TxnStatus.PREPARE_ABORT)
    gateway = start_gateway(data_dir)
    try:
        client = httpx.Client(base_url=gateway.url, timeout=30)
        deadline = time.monotonic() + DEADLINE_S
        states = {}
        while time.monotonic() < deadline:
            states = {
                tid: client.get(f"{V3}/transactions/{tid}").json()["state"]
                for tid in ("died-committing", "died-aborting")
            }
            if states == {"died-committing": "CompleteCommit", "died-aborting": "CompleteAbort"}:
                break
            time.sleep(0.5)
        assert states == {"died-committing": "CompleteCommit", "died-aborting": "CompleteAbort"}
        assert values(client, 0, "read_committed") == [0, 1]  # the marker went to offset 2
        assert values(client, 1, "read_committed") == []
        assert values(client, 1, "read_uncommitted") == [0, 1]
        stored = client.get(f"/groups/{GROUP}/offsets").json()["offsets"]
        assert [(o["topic"], o["partition"], o["offset"]) for o in stored] == [("input", 0, 42)]
    finally:
        gateway.stop()
