"""The body of an append handed to a partition's leader: by a gateway node that does not lead
the partition, and by Spark executors writing into a topic a live gateway leads (DESIGN.md:
every writer commits as the leader or hands its change to the leader).

JSON with base64 bytes: `{"records": [{"key", "value", "timestamp_ms", "headers": [[name,
value]]}], "producer": {...} | null, "transaction": {"app_id", "version"} | null}`. The answer
is `{"base_offset", "append_time_ms", "duplicate"}`; `duplicate` means the table already held
the transaction, so nothing was appended (and base_offset is -1).
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass

from storage_layout.producer_state import ProducerBatch
from storage_layout.records import AppTransaction, NewRecord, Records, as_record_list

INTERNAL_APPEND_PATH = "/_lakelog/internal/topics/{topic}/partitions/{partition}/append"
# A transaction marker for the partition's leader, and a committed transaction's offsets for
# the group's coordinator (FORMAT.md §14, §15).
INTERNAL_MARKER_PATH = "/_lakelog/internal/topics/{topic}/partitions/{partition}/marker"
INTERNAL_TXN_OFFSETS_PATH = "/_lakelog/internal/groups/{group}/transaction-offsets"


@dataclass(frozen=True, slots=True)
class AppendRequest:
    records: tuple[NewRecord, ...]
    producer: ProducerBatch | None = None
    transaction: AppTransaction | None = None


def encode_append(
    records: Records,
    *,
    producer: ProducerBatch | None = None,
    transaction: AppTransaction | None = None,
) -> dict:
    return {
        "producer": None if producer is None else dataclasses.asdict(producer),
        "transaction": None if transaction is None else dataclasses.asdict(transaction),
        "records": [
            {
                "key": _b64(record.key),
                "value": _b64(record.value),
                "timestamp_ms": record.timestamp_ms,
                "headers": [[name, _b64(value)] for name, value in record.headers],
            }
            for record in as_record_list(records)
        ],
    }


def decode_append(body: dict) -> AppendRequest:
    producer, transaction = body.get("producer"), body.get("transaction")
    return AppendRequest(
        records=tuple(
            NewRecord(
                key=_unb64(item["key"]),
                value=_unb64(item["value"]),
                timestamp_ms=item["timestamp_ms"],
                headers=tuple((name, _unb64(value)) for name, value in item["headers"]),
            )
            for item in body["records"]
        ),
        producer=None if producer is None else ProducerBatch(**producer),
        transaction=None if transaction is None else AppTransaction(**transaction),
    )


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)
