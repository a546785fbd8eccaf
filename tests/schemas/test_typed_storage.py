"""Typed columns in the partition table itself (FORMAT.md §17), driven on the log directly:
added by the append that brings them, widened by new versions (older rows read null), a
conflicting type stored as null (never a second type for one column), kept by small-file
merges and maintenance rewrites, and read by delta-rs with no lakelog code."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable

from storage_layout.log.partition_log import DeltaPartitionLog
from storage_layout.records import RecordColumns
from storage_layout.schema import NEW_RECORDS_SCHEMA
from storage_layout.topic_config import TopicConfig

V1 = pa.struct([("id", pa.int64()), ("item", pa.string())])
V2 = pa.struct([("id", pa.int64()), ("item", pa.string()), ("qty", pa.int64())])
CONFIG = TopicConfig()


def _records(count: int, typed: pa.Table | None = None) -> RecordColumns:
    table = pa.table(
        {
            "timestamp_ms": pa.nulls(count, pa.int64()),
            "key": pa.array([b"k"] * count, pa.binary()),
            "value": pa.array([b"raw"] * count, pa.binary()),
            "headers": pa.nulls(count, NEW_RECORDS_SCHEMA.field("headers").type),
        },
        schema=NEW_RECORDS_SCHEMA,
    )
    return RecordColumns(table, count * 4, typed)


def _typed(schema_id: int, kind: pa.DataType, values: list[dict]) -> pa.Table:
    return pa.table(
        {
            "value_schema_id": pa.array([schema_id] * len(values), pa.int32()),
            "value_fields": pa.array(values, kind),
        }
    )


def _typed_rows(uri: str) -> list[dict]:
    table = DeltaTable(uri).to_pyarrow_table(columns=["offset", "value_schema_id", "value_fields"])
    return table.sort_by("offset").to_pylist()


def test_typed_columns_arrive_widen_and_keep_one_type(tmp_path):
    uri = str(tmp_path / "orders" / "0")
    DeltaPartitionLog.create(uri)
    log = DeltaPartitionLog.open(uri)
    log.append(_records(1), config=CONFIG)
    assert log.snapshot.typed_types == {}
    log.append(_records(1, _typed(1, V1, [{"id": 1, "item": "a"}])), config=CONFIG)
    log.append(_records(1, _typed(2, V2, [{"id": 2, "item": "b", "qty": 3}])), config=CONFIG)
    conflicting = pa.struct([("id", pa.string())])
    log.append(_records(1, _typed(3, conflicting, [{"id": "x"}])), config=CONFIG)

    assert DeltaPartitionLog.open(uri).snapshot.typed_types["value_fields"] == V2
    assert _typed_rows(uri) == [
        {"offset": 0, "value_schema_id": None, "value_fields": None},
        {"offset": 1, "value_schema_id": 1, "value_fields": {"id": 1, "item": "a", "qty": None}},
        {"offset": 2, "value_schema_id": 2, "value_fields": {"id": 2, "item": "b", "qty": 3}},
        # a field whose type conflicts is null (the raw value keeps it)
        {
            "offset": 3,
            "value_schema_id": 3,
            "value_fields": {"id": None, "item": None, "qty": None},
        },
    ]


def test_small_file_merges_keep_typed_columns(tmp_path):
    uri = str(tmp_path / "orders" / "0")
    DeltaPartitionLog.create(uri)
    log = DeltaPartitionLog.open(uri)
    for n in range(40):
        kind, row = (
            (V1, {"id": n, "item": "a"}) if n < 20 else (V2, {"id": n, "item": "b", "qty": n})
        )
        log.append(
            _records(1, _typed(1 if n < 20 else 2, kind, [row]) if n % 3 else None), config=CONFIG
        )
    before = _typed_rows(uri)
    files_before = len(DeltaTable(uri).file_uris())
    assert log.maybe_merge_small_files() > 0
    assert len(DeltaTable(uri).file_uris()) < files_before
    assert _typed_rows(uri) == before
    merged = log.read_files(list(log.snapshot.files))
    assert merged.schema.field("value_fields").type == V2
    assert merged.num_rows == 40
