"""The encodings of the node-to-node routes (routes.py): an append's body, and a refusal.

An append handed to a partition's leader (by a node that does not lead the partition, and by
Spark executors writing into a topic a live node leads) is JSON with base64 bytes:
`{"records": [{"key", "value", "timestamp_ms", "headers": [[name, value]]}], "producer": {...} |
null, "transaction": {"app_id", "version"} | null}`. The answer is `{"base_offset",
"append_time_ms", "duplicate"}`; `duplicate` means the table already held the transaction, so
nothing was appended (and base_offset is -1).

A refusal (status 409) is `{"error": <the error's class name>, "message"}`; a producer's
sequence or epoch error also names itself as `producer_error`, as nodes have always sent it.
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass

from storage_layout.errors import ProducerError
from storage_layout.producer_state import ProducerBatch
from storage_layout.records import AppTransaction, NewRecord, Records, as_record_list

REFUSED_STATUS = 409


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


def refusal(error: Exception) -> dict:
    """The body a node answers a refused node-to-node request with (REFUSED_STATUS)."""
    body = {"error": type(error).__name__, "message": str(error)}
    if isinstance(error, ProducerError):
        body["producer_error"] = body["error"]
    return body


def producer_error_from(body: dict) -> ProducerError | None:
    """The producer-sequence error a refusal carries (the leader's verdict, unchanged), or None
    when it carries another."""
    name = body.get("producer_error")
    if name is None:
        return None
    error_types = {t.__name__: t for t in ProducerError.__subclasses__()}
    error_type = error_types.get(name, ProducerError)
    return error_type(body.get("message", "the leader rejected the producer batch"))
