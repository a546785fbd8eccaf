"""Kafka's RecordBatch v2 ("magic 2"), the record format of Produce and Fetch since Kafka 0.11.

Decoding checks what a broker must: the CRC32C, the batch and record lengths, the record count,
the codec; it returns the records as Arrow columns and the producer fields. Encoding writes the
Arrow records of a fetch as uncompressed batches (consumers accept any codec; compressing on the
broker would only spend its CPU). Layout: https://kafka.apache.org/documentation/#recordbatch

The per-record work runs in Rust (native_codec, built from native/ by `make install`); the
Python functions here are the reference it is tested against, and the fallback when the
extension is not installed (five to ten times slower).
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass

import cramjam
import pyarrow as pa
from crc32c import crc32c

from storage_layout.log.arrow_records import compressed_with
from storage_layout.records import NewRecord, Records

try:
    from api.kafka import native_codec
except ImportError:  # lakelog_native not built: the Python reference codec serves
    native_codec = None

MAGIC = 2
# baseOffset int64, batchLength int32: the part before what batchLength counts.
LOG_OVERHEAD = 12
# partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp,
# producerId, producerEpoch, baseSequence, records count.
BATCH_HEADER = struct.Struct(">ibIhiqqqhii")
RECORDS_AT = LOG_OVERHEAD + BATCH_HEADER.size  # 61: where the (maybe compressed) records begin
CRC_FROM = 21  # the CRC covers attributes .. the end

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
_XERIAL_MAGIC = b"\x82SNAPPY\x00"  # Java's snappy framing (xerial SnappyOutputStream)
_XERIAL_BLOCK_BYTES = 32 * 1024
# LZ4 frame magic, FLG 0x60 (version 1, independent blocks, no checksums), BD 0x40 (64 KiB
# blocks), and the header checksum: (xxh32(FLG BD) >> 8) & 0xFF.
_LZ4_FRAME_HEADER = b"\x04\x22\x4d\x18\x60\x40\x82"
_LZ4_BLOCK_BYTES = 64 * 1024
_LZ4_UNCOMPRESSED_BIT = 0x80000000


class CorruptBatch(ValueError):
    """The bytes are not a valid RecordBatch v2."""

    code = "CORRUPT_MESSAGE"


class UnsupportedCodec(ValueError):
    """The batch names a compression codec that does not exist."""

    code = "UNSUPPORTED_COMPRESSION_TYPE"


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """One producer batch: its records and the fields idempotence and transactions need."""

    records: Records
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    is_control: bool
    codec: str

    @property
    def idempotent(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID


def decode_batches(data: bytes | memoryview) -> list[DecodedBatch]:
    """Every batch of a Produce request's `records` field.

    Raises:
        CorruptBatch: a bad length, magic, CRC, record count or record.
        UnsupportedCodec: an unknown compression codec.
    """
    view = memoryview(data)
    batches, position = [], 0
    while position < len(view):
        if len(view) - position < RECORDS_AT:
            raise CorruptBatch(f"{len(view) - position} trailing bytes are not a record batch")
        (batch_length,) = struct.unpack_from(">i", view, position + 8)
        end = position + LOG_OVERHEAD + batch_length
        if batch_length < BATCH_HEADER.size or end > len(view):
            raise CorruptBatch(f"batch length {batch_length} does not fit the request")
        batches.append(_decode_batch(view[position:end]))
        position = end
    return batches


def _decode_batch(view: memoryview) -> DecodedBatch:
    (
        _leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        _max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = BATCH_HEADER.unpack_from(view, LOG_OVERHEAD)
    if magic != MAGIC:
        raise CorruptBatch(f"record batch magic {magic}: only magic 2 (Kafka >= 0.11) is accepted")
    if crc32c(view[CRC_FROM:]) != crc:
        raise CorruptBatch("record batch CRC32C mismatch: the batch was damaged in transit")
    if count < 0 or last_offset_delta != count - 1:
        raise CorruptBatch(f"{count} records but lastOffsetDelta {last_offset_delta}")
    codec_id = attributes & COMPRESSION_MASK
    if codec_id >= len(CODECS):
        raise UnsupportedCodec(f"compression codec {codec_id} does not exist")
    body = _decompress(codec_id, view[RECORDS_AT:])
    records = decode_records(body, count, base_timestamp)
    if codec_id:  # remembered per record: `compression.type=producer` fetches it back
        records = compressed_with(records, codec_id)
    return DecodedBatch(
        records,
        producer_id,
        producer_epoch,
        base_sequence,
        bool(attributes & TRANSACTIONAL_BIT),
        bool(attributes & CONTROL_BIT),
        CODECS[codec_id],
    )


def _decompress(codec_id: int, body: memoryview) -> bytes | memoryview:
    try:
        if codec_id == 0:
            return body
        if codec_id == 1:
            return gzip.decompress(body)
        if codec_id == 2:
            return _snappy(bytes(body))
        if codec_id == 3:
            return bytes(cramjam.lz4.decompress(body))
        return bytes(cramjam.zstd.decompress(body))
    except (OSError, EOFError, ValueError, cramjam.DecompressionError) as error:
        raise CorruptBatch(f"{CODECS[codec_id]} data does not decompress: {error}") from None


def compress(codec_id: int, body: bytes) -> bytes:
    """A records section compressed with codec `codec_id` (1..4), as Kafka's Java producer
    writes it: gzip, snappy in xerial framing (Java and librdkafka read it; raw snappy only
    librdkafka), the LZ4 frame format, zstd."""
    if codec_id == 1:
        return gzip.compress(body, compresslevel=1)
    if codec_id == 2:
        return _xerial(body)
    if codec_id == 3:
        return _lz4_frame(body)
    return bytes(cramjam.zstd.compress(body))


def _lz4_frame(body: bytes) -> bytes:
    """The LZ4 frame Kafka's KafkaLZ4BlockOutputStream writes, the one Java's consumer reads:
    independent 64 KiB blocks, no checksums (a linked-block frame, LZ4's default, it refuses).
    An incompressible block is stored as is (the size's high bit)."""
    parts = [_LZ4_FRAME_HEADER]
    for start in range(0, len(body), _LZ4_BLOCK_BYTES):
        chunk = body[start : start + _LZ4_BLOCK_BYTES]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):
            parts += [struct.pack("<I", len(chunk) | _LZ4_UNCOMPRESSED_BIT), bytes(chunk)]
        else:
            parts += [struct.pack("<I", len(block)), block]
    parts.append(b"\x00\x00\x00\x00")  # the end mark
    return b"".join(parts)


def _xerial(body: bytes) -> bytes:
    """xerial's SnappyOutputStream: magic, version 1, compatible version 1, then blocks of
    (int32 length, raw snappy) of at most 32 KiB of input each."""
    parts = [_XERIAL_MAGIC, struct.pack(">ii", 1, 1)]
    for start in range(0, len(body), _XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(body[start : start + _XERIAL_BLOCK_BYTES]))
        parts += [struct.pack(">i", len(block)), block]
    return b"".join(parts)


def _snappy(body: bytes) -> bytes:
    """Raw snappy (librdkafka) or Java's xerial framing: a magic, two versions, then blocks of
    (int32 length, raw snappy)."""
    if not body.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(body))
    parts, position = [], 16
    while position < len(body):
        (size,) = struct.unpack_from(">i", body, position)
        block = body[position + 4 : position + 4 + size]
        if size < 0 or len(block) != size:
            raise CorruptBatch("xerial snappy block length does not fit the batch")
        parts.append(bytes(cramjam.snappy.decompress_raw(block)))
        position += 4 + size
    return b"".join(parts)


def decode_records(body, count: int, base_timestamp: int) -> Records:
    """A batch's `count` records, from its decompressed records section.

    Raises:
        CorruptBatch: a record is malformed.
    """
    if native_codec is None:
        return decode_records_python(body, count, base_timestamp)
    try:
        return native_codec.decode_records(body, count, base_timestamp)
    except ValueError as error:
        raise CorruptBatch(str(error)) from None


def decode_records_python(body, count: int, base_timestamp: int) -> tuple[NewRecord, ...]:
    """The reference decoder: one pass over the records. Varints of one or two bytes
    (lengths below 8 KiB, small deltas) are decoded inline; longer ones by _read_varint."""
    data = bytes(body)
    records, position, end = [], 0, len(data)
    try:
        for _ in range(count):
            length, position = _varint_at(data, position)
            record_end = position + length
            if length < 6 or record_end > end:
                raise CorruptBatch(f"record length {length} does not fit the batch")
            timestamp_delta, position = _varint_at(data, position + 1)  # after attributes
            _offset_delta, position = _varint_at(data, position)
            size, position = _varint_at(data, position)
            key = None if size < 0 else data[position : position + size]
            position += max(size, 0)
            size, position = _varint_at(data, position)
            value = None if size < 0 else data[position : position + size]
            position += max(size, 0)
            header_count, position = _varint_at(data, position)
            headers = ()
            if header_count:
                headers, position = _read_headers(data, position, header_count)
            if position != record_end:
                raise CorruptBatch("a record's fields do not add up to its length")
            timestamp_ms = base_timestamp + timestamp_delta
            if abs(timestamp_ms) > _TIMESTAMP_MS_LIMIT:
                raise CorruptBatch("a record timestamp is out of range")
            records.append(NewRecord(key, value, timestamp_ms, headers))
    except IndexError:
        raise CorruptBatch("the records end before the batch says") from None
    if position != end:
        raise CorruptBatch(f"{end - position} bytes after the last of {count} records")
    return tuple(records)


def _varint_at(data: bytes, position: int) -> tuple[int, int]:
    """A zigzag varint at `position` and the position after it: one- and two-byte ones here,
    longer ones by _read_varint."""
    first = data[position]
    if first < 0x80:
        return _ZIGZAG[first], position + 1
    second = data[position + 1]
    if second < 0x80:
        raw = (first & 0x7F) | (second << 7)
        return (raw >> 1) ^ -(raw & 1), position + 2
    return _read_varint(data, position)


def _read_headers(data: bytes, position: int, count: int) -> tuple[tuple, int]:
    if count < 0:
        raise CorruptBatch(f"record header count {count} is negative")
    headers = []
    for _ in range(count):
        name, position = _read_bytes(data, position)
        header_value, position = _read_bytes(data, position)
        if name is None:
            raise CorruptBatch("a record header has a null key")
        headers.append((name.decode("utf-8", "replace"), header_value))
    return tuple(headers), position


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    """A zigzag varint (varlong too: Python's ints do not overflow)."""
    shift = result = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
        if shift > 63:
            raise CorruptBatch("a varint is longer than 10 bytes")


def _read_bytes(data: bytes, position: int) -> tuple[bytes | None, int]:
    length, position = _read_varint(data, position)
    if length < 0:
        return None, position
    end = position + length
    if end > len(data):
        raise CorruptBatch("a key, value or header runs past its record")
    return data[position:end], end


# ---- encoding --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EncodedBody:
    """One batch's records section and what its header says about them."""

    body: bytes
    base_offset: int
    last_offset: int
    base_timestamp_ms: int
    max_timestamp_ms: int


def encode_body(records: pa.Table, start: int, stop: int) -> EncodedBody:
    """Rows [start, stop) of a fetch's records as one records section: in Rust when the
    extension is there, else encode_body_python."""
    if native_codec is None:
        return encode_body_python(records, start, stop)
    return EncodedBody(*native_codec.encode_records(records, start, stop))


def encode_control_record(records: pa.Table, row: int, control: int) -> EncodedBody:
    """The marker at `row` as a control record: key (version 0, type), value (version 0,
    coordinator epoch 0), as Kafka's EndTransactionMarker."""
    offset = records.column("offset")[row].as_py()
    timestamp_ms = records.column("timestamp")[row].value // 1000
    body = bytearray()
    key = struct.pack(">hh", 0, control)
    _encode_record(body, 0, 0, key, struct.pack(">hi", 0, 0), None)
    return EncodedBody(bytes(body), offset, offset, timestamp_ms, timestamp_ms)


def encode_body_python(records: pa.Table, start: int, stop: int) -> EncodedBody:
    """The reference encoder of rows [start, stop)."""
    columns = records.slice(start, stop - start)
    offsets = columns.column("offset").to_pylist()
    timestamps_ms = [m // 1000 for m in columns.column("timestamp").cast(pa.int64()).to_pylist()]
    keys = columns.column("key").to_pylist()
    values = columns.column("value").to_pylist()
    headers = columns.column("headers").to_pylist()
    body = bytearray()
    for i, offset in enumerate(offsets):
        _encode_record(
            body,
            timestamps_ms[i] - timestamps_ms[0],
            offset - offsets[0],
            keys[i],
            values[i],
            headers[i],
        )
    return EncodedBody(bytes(body), offsets[0], offsets[-1], timestamps_ms[0], max(timestamps_ms))


def _encode_record(out: bytearray, timestamp_delta, offset_delta, key, value, headers) -> None:
    record = bytearray(b"\x00")  # attributes
    record += _varint(timestamp_delta)
    record += _varint(offset_delta)
    _append_bytes(record, key)
    _append_bytes(record, value)
    record += _varint(len(headers) if headers else 0)
    for header in headers or ():
        _append_bytes(record, header["key"].encode())
        _append_bytes(record, header["value"])
    out += _varint(len(record))
    out += record


def _append_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += b"\x01"  # zigzag(-1)
    else:
        out += _varint(len(data))
        out += data


def _varint(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    if encoded < 0x80:
        return _SMALL[encoded]
    out = bytearray()
    while encoded >= 0x80:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)
    return bytes(out)


_SMALL = [bytes([n]) for n in range(0x80)]
# Timestamps become Arrow microseconds: a millisecond value beyond this overflows int64.
_TIMESTAMP_MS_LIMIT = (2**63 - 1) // 1000
_ZIGZAG = [(n >> 1) ^ -(n & 1) for n in range(0x80)]  # one-byte zigzag varints, decoded
