"""The records of a RecordBatch v2 to Arrow columns and back, in Rust (`native/`, the
`lakelog_native` module): the per-record work of every Produce and Fetch, with no Python
object per record. codec.py frames, checks and compresses the batches around it.

The Rust side hands over plain buffers (int32 offsets, data, validity bitmaps) that become
Arrow arrays here without a copy, and reads Arrow arrays' buffers in place.
"""

from __future__ import annotations

import lakelog_native
import pyarrow as pa

from storage_layout.records import NamedSchemas, RecordColumns
from storage_layout.schema import HEADER_TYPE, HEADERS_TYPE, NEW_RECORDS_SCHEMA

_INT32_BYTES = 4


def decode_records(body, count: int, base_timestamp_ms: int) -> RecordColumns:
    """`count` records of a decompressed records section.

    Raises:
        ValueError: a record is malformed (the message says how).
    """
    size_bytes, timestamps, keys, values, headers, key_ids, value_ids = (
        lakelog_native.decode_records(body, count, base_timestamp_ms)
    )
    columns = [
        pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(timestamps)]),
        _binary(pa.binary(), count, keys),
        _binary(pa.binary(), count, values),
        _headers(count, headers),
    ]
    table = pa.Table.from_arrays(columns, schema=NEW_RECORDS_SCHEMA)
    # A schema is named by a wire-format prefix or a header: with neither, typed columns
    # and schema lookups are skipped, and only the ids listed are looked up (TypedRecords).
    return RecordColumns(table, size_bytes, named=NamedSchemas(_ids(key_ids), _ids(value_ids)))


def _ids(listed: list[int] | None) -> frozenset[int] | None:
    return None if listed is None else frozenset(listed)


def encode_records(records: pa.Table, start: int, stop: int) -> tuple[bytes, int, int, int, int]:
    """Rows [start, stop) of a fetch's records (columns offset, timestamp, key, value,
    headers) as one uncompressed records section, with what its batch header says of them:
    (body, base offset, last offset, base timestamp ms, max timestamp ms), the fields of
    codec.EncodedBody (codec.encode_body wraps them)."""
    offsets = _array(records, "offset", pa.int64())
    timestamps = _array(records, "timestamp", records.schema.field("timestamp").type)
    keys = _array(records, "key", pa.binary())
    values = _array(records, "value", pa.binary())
    headers = _plain_headers(_array(records, "headers", HEADERS_TYPE))
    encoded = lakelog_native.encode_records(
        (offsets.offset, offsets.buffers()[1]),
        (timestamps.offset, timestamps.buffers()[1]),
        _binary_args(keys),
        _binary_args(values),
        _headers_args(headers),
        start,
        stop,
    )
    return tuple(encoded)


def _binary(type_: pa.DataType, length: int, parts: tuple) -> pa.Array:
    offsets, data, validity, null_count = parts
    buffers = [_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(type_, length, buffers, null_count=null_count)


def _headers(count: int, parts: tuple) -> pa.Array:
    offsets, validity, null_count, keys, values = parts
    pairs = len(keys[0]) // _INT32_BYTES - 1
    struct = pa.StructArray.from_arrays(
        [_binary(pa.string(), pairs, keys), _binary(pa.binary(), pairs, values)],
        fields=list(HEADER_TYPE),
    )
    buffers = [_buffer(validity), pa.py_buffer(offsets)]
    return pa.Array.from_buffers(
        HEADERS_TYPE, count, buffers, null_count=null_count, children=[struct]
    )


def _buffer(data: bytes | None) -> pa.Buffer | None:
    return None if data is None else pa.py_buffer(data)


def _array(records: pa.Table, name: str, type_: pa.DataType) -> pa.Array:
    """One contiguous array of the column, in the type the Rust side reads."""
    column = records.column(name)
    if column.type != type_:
        column = column.cast(type_)
    return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)


def _plain_headers(headers: pa.ListArray) -> pa.ListArray:
    """The headers with unsliced children (the Rust side follows only the list's own offset);
    a rebuilt copy in the rare case they are not."""
    struct = headers.values
    if struct.offset == 0 and all(struct.field(i).offset == 0 for i in range(2)):
        return headers
    return pa.array(headers.to_pylist(), HEADERS_TYPE)


def _binary_args(array: pa.Array) -> tuple:
    validity, offsets, data = array.buffers()
    return array.offset, validity, offsets, _data(data)


def _headers_args(headers: pa.ListArray) -> tuple:
    struct = headers.values
    return (
        headers.offset,
        headers.buffers()[0],
        headers.buffers()[1],
        _binary_args(struct.field(0)),
        _binary_args(struct.field(1)),
    )


def _data(buffer: pa.Buffer | None) -> pa.Buffer:
    """An array of only nulls or empty values may have no data buffer at all."""
    return buffer if buffer is not None else pa.py_buffer(b"")
