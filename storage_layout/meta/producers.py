"""Producer id allocation: `_meta/producers`, a Delta table with one row per allocation.

Ids come from the `txn` action `Transaction("producer_ids", <highest id handed out>)`: an
allocation commits id = that version + 1 on the snapshot it read, so two nodes allocating from the
same snapshot cannot both commit (the same CAS as offsets, FORMAT.md §3); the loser reloads and
takes the next id. A transactional id's row also commits `Transaction("producer/<id>", n)` (n = its
n-th initialisation), so two nodes re-initialising the same transactional id cannot both win.

Concurrency contract: safe from several threads (a lock serializes this process's writers);
processes and nodes are serialized by the CAS.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from storage_layout import paths
from storage_layout.errors import StorageUnavailable
from storage_layout.meta.table import MetaTable, Verdict
from storage_layout.producer_state import EPOCH_MAX
from storage_layout.schema import TIMESTAMP_TYPE

PRODUCERS_TABLE = "producers"
ID_APP_ID = "producer_ids"
ALLOCATE_ATTEMPTS_MAX = 20

PRODUCERS_SCHEMA = pa.schema(
    [
        pa.field("producer_id", pa.int64(), nullable=False),
        pa.field("producer_epoch", pa.int16(), nullable=False),
        pa.field("transactional_id", pa.string()),
        pa.field("client_id", pa.string()),
        pa.field("allocated_at", TIMESTAMP_TYPE, nullable=False),
    ]
)


@dataclass(frozen=True, slots=True)
class ProducerIdentity:
    """What an idempotent producer stamps on its batches."""

    producer_id: int
    producer_epoch: int


class ProducerIdAllocator:
    """Hands out producer ids and epochs from `<root>/_meta/producers`."""

    def __init__(self, root: str) -> None:
        self._uri = paths.meta_table_uri(paths.normalize_root(root), PRODUCERS_TABLE)
        self._lock = threading.Lock()
        self._table = MetaTable(self._uri, PRODUCERS_SCHEMA)

    def init_producer(
        self, transactional_id: str | None = None, client_id: str | None = None
    ) -> ProducerIdentity:
        """A new producer id at epoch 0; for a known `transactional_id`, its id with the epoch
        bumped (which fences the previous epoch), or a new id once the epoch would overflow.

        Raises:
            StorageUnavailable: the table could not be written (also after many lost races).
        """
        with self._lock:
            for _ in range(ALLOCATE_ATTEMPTS_MAX):
                identity = self._try_init(transactional_id, client_id)
                if identity is not None:
                    return identity
                # another node won this round: decide again on the refreshed table
        raise StorageUnavailable(f"Could not allocate a producer id in {self._uri}: contention.")

    def _try_init(
        self, transactional_id: str | None, client_id: str | None
    ) -> ProducerIdentity | None:
        self._table.refresh()
        previous = self._latest(transactional_id) if transactional_id else None
        if previous is not None and previous.producer_epoch < EPOCH_MAX:
            identity = ProducerIdentity(previous.producer_id, previous.producer_epoch + 1)
            transactions = []
        else:
            last_id = self._table.transaction_version(ID_APP_ID)
            identity = ProducerIdentity(0 if last_id is None else last_id + 1, 0)
            transactions = [(ID_APP_ID, identity.producer_id)]
        if transactional_id:
            generation = self._table.transaction_version(_transactional_app_id(transactional_id))
            version = 1 if generation is None else generation + 1
            transactions.append((_transactional_app_id(transactional_id), version))
        row = _row(identity, transactional_id, client_id)
        committed = self._table.append(row, transactions) is Verdict.COMMITTED
        return identity if committed else None

    def _latest(self, transactional_id: str) -> ProducerIdentity | None:
        """The transactional id's newest (producer_id, epoch): ids only grow, so the maximum."""
        table = self._table.read(["producer_id", "producer_epoch", "transactional_id"])
        rows = table.filter(pc.equal(table.column("transactional_id"), transactional_id))
        if rows.num_rows == 0:
            return None
        best = max(
            zip(
                rows.column("producer_id").to_pylist(),
                rows.column("producer_epoch").to_pylist(),
                strict=True,
            )
        )
        return ProducerIdentity(*best)


def _transactional_app_id(transactional_id: str) -> str:
    return f"producer/{transactional_id}"


def _row(identity: ProducerIdentity, transactional_id, client_id) -> pa.Table:
    return pa.table(
        {
            "producer_id": [identity.producer_id],
            "producer_epoch": [identity.producer_epoch],
            "transactional_id": [transactional_id],
            "client_id": [client_id],
            "allocated_at": [int(time.time() * 1_000_000)],
        },
        schema=PRODUCERS_SCHEMA,
    )
