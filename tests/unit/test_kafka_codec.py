"""The RecordBatch v2 codec (api/kafka/codec.py) on hand-built batches: Java's xerial snappy
framing, headers and null keys and values, timestamps to the millisecond, and damage refused."""

from __future__ import annotations

import struct

import cramjam
import pyarrow as pa
import pytest
from crc32c import crc32c

from api.kafka.codec import CorruptBatch, UnsupportedCodec, decode_batches
from api.kafka.fetch_batches import encode_records

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def records(values, *, keys=None, headers=None, timestamps_ms=None) -> pa.Table:
    count = len(values)
    return pa.table(
        {
            "offset": pa.array(range(count), pa.int64()),
            "timestamp": pa.array(
                [
                    t * 1000
                    for t in (timestamps_ms or [1_700_000_000_123 + i for i in range(count)])
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            "timestamp_type": pa.array([0] * count, pa.int8()),
            "key": pa.array(keys or [None] * count, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "headers": pa.array(headers or [None] * count, HEADER_TYPE),
        }
    )


def recompressed(batch: bytes, codec_id: int, body: bytes) -> bytes:
    """`batch` with its records replaced by `body` and the codec bits set, CRC and length fixed."""
    out = bytearray(batch[:61] + body)
    attributes = struct.unpack_from(">h", out, 21)[0] | codec_id
    struct.pack_into(">h", out, 21, attributes)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def test_round_trip_keeps_keys_values_headers_and_milliseconds():
    table = records(
        [b"a", None, b"c" * 300],
        keys=[None, b"k", b"key"],
        headers=[None, [{"key": "h", "value": None}], [{"key": "x", "value": b"1"}]],
    )
    [batch] = decode_batches(encode_records(table))
    assert [(r.key, r.value, r.timestamp_ms, r.headers) for r in batch.records.to_records()] == [
        (None, b"a", 1_700_000_000_123, ()),
        (b"k", None, 1_700_000_000_124, (("h", None),)),
        (b"key", b"c" * 300, 1_700_000_000_125, (("x", b"1"),)),
    ]
    assert not batch.idempotent and batch.codec == "none"


def test_java_xerial_snappy_framing_is_decoded():
    plain = encode_records(records([b"one", b"two"]))
    raw_records = plain[61:]
    block = bytes(cramjam.snappy.compress_raw(raw_records))
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
    [batch] = decode_batches(recompressed(plain, 2, xerial))
    assert batch.codec == "snappy"
    assert [r.value for r in batch.records.to_records()] == [b"one", b"two"]


def test_damage_is_refused():
    plain = encode_records(records([b"one"]))
    flipped = bytearray(plain)
    flipped[-1] ^= 1
    with pytest.raises(CorruptBatch, match="CRC"):
        decode_batches(bytes(flipped))
    with pytest.raises(CorruptBatch):
        decode_batches(plain[:-3])
    with pytest.raises(UnsupportedCodec):
        decode_batches(recompressed(plain, 7, plain[61:]))
    with pytest.raises(CorruptBatch, match="does not decompress"):
        decode_batches(recompressed(plain, 4, b"not zstd"))
