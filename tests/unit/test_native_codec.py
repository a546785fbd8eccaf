"""The Rust record codec (native/, api/kafka/native_codec.py) against the Python reference in
api/kafka/codec.py: the same records out of the same bytes, the same refusals of damaged
bytes, the same bytes out of the same fetched columns. Seeded, so a failure replays."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from api.kafka import codec, native_codec
from api.kafka.codec import CorruptBatch
from api.kafka.fetch_batches import encode_records
from storage_layout.log.arrow_records import records_to_arrow
from storage_layout.records import NewRecord, RecordColumns, records_size_bytes

BASE_TIMESTAMP_MS = 1_700_000_000_000


def test_the_extension_is_built_and_used():
    # make install builds native/; without it the broker would quietly run 30x slower codecs.
    assert codec.native_codec is native_codec


def random_record(rng: random.Random) -> NewRecord:
    def payload() -> bytes | None:
        kind = rng.random()
        if kind < 0.15:
            return None
        if kind < 0.25:
            return b""
        # Some above 8 KiB: their lengths take three varint bytes.
        size = rng.choice((1, 7, 100, 300, 9000))
        return rng.randbytes(size)

    headers = ()
    if rng.random() < 0.4:
        names = ("trace", "é-ünï", "", "x" * 200)
        headers = tuple((rng.choice(names), payload()) for _ in range(rng.randint(1, 3)))
    timestamp_ms = BASE_TIMESTAMP_MS + rng.randint(-5_000_000, 5_000_000)
    return NewRecord(payload(), payload(), timestamp_ms, headers)


def records_section(records: list[NewRecord]) -> bytes:
    """The records as a Produce batch's records section (the reference encoder's bytes)."""
    table = records_to_arrow(records, 0, BASE_TIMESTAMP_MS, False)
    return codec.encode_body_python(table, 0, len(records)).body


def decode_both(body: bytes, count: int, base_ms: int):
    """(reference outcome, native outcome): a list of records or 'refused'."""
    try:
        expected = list(codec.decode_records_python(body, count, base_ms))
    except CorruptBatch:
        expected = "refused"
    try:
        actual = native_codec.decode_records(body, count, base_ms).to_records()
    except ValueError:
        actual = "refused"
    return expected, actual


def test_both_decoders_read_the_same_records():
    rng = random.Random(15)
    for _ in range(150):
        records = [random_record(rng) for _ in range(rng.randint(1, 40))]
        body = records_section(records)
        base_ms = records[0].timestamp_ms  # the deltas are from the first record
        decoded = native_codec.decode_records(body, len(records), base_ms)
        assert isinstance(decoded, RecordColumns)
        assert decoded.to_records() == records
        assert decoded.size_bytes == records_size_bytes(records)
        assert list(codec.decode_records_python(body, len(records), base_ms)) == records


def test_both_decoders_refuse_the_same_damage():
    rng = random.Random(16)
    refused = 0
    for _ in range(1500):
        records = [random_record(rng) for _ in range(rng.randint(1, 6))]
        body = bytearray(records_section(records))
        count = len(records)
        mutation = rng.random()
        if mutation < 0.5:
            for _ in range(rng.randint(1, 3)):
                body[rng.randrange(len(body))] = rng.randrange(256)
        elif mutation < 0.7:
            del body[rng.randrange(len(body)) :]
        elif mutation < 0.85:
            body[rng.randrange(len(body)) : 0] = rng.randbytes(rng.randint(1, 4))
        else:
            count += rng.choice((-1, 1, 1000))
        expected, actual = decode_both(bytes(body), max(count, 0), BASE_TIMESTAMP_MS)
        assert actual == expected, bytes(body).hex()
        refused += expected == "refused"
    assert refused > 500  # the mutations did reach the checks


@pytest.mark.parametrize(
    "body, count",
    [
        (b"", 1),  # no record at all
        (b"\x0c\x00" + b"\xff" * 11, 1),  # a varint longer than ten bytes
        (b"\x7e" + b"\x00" * 5, 1),  # a length past the end
        (b"\x0c\x00\x00\x00\x01\x01\x01\x00", 1),  # bytes left over after the record
    ],
)
def test_hand_made_damage_is_refused_by_both(body: bytes, count: int):
    assert decode_both(body, count, 0) == ("refused", "refused")


def test_a_header_key_that_is_not_utf8_is_read_leniently_by_both():
    # attributes, ts delta, offset delta, null key, null value, one header: key 0xff, value null
    record = b"\x00\x00\x00\x01\x01\x02\x02\xff\x01"
    body = bytes([len(record) * 2]) + record
    expected, actual = decode_both(body, 1, 0)
    assert expected == actual == [NewRecord(None, None, 0, (("\ufffd", None),))]


def fetched_table(rng: random.Random, rows: int) -> pa.Table:
    records = [random_record(rng) for _ in range(rows)]
    table = records_to_arrow(records, rng.randint(0, 10**12), BASE_TIMESTAMP_MS, False)
    if rng.random() < 0.3:  # a compacted table: offsets with gaps
        keep = pa.array(sorted(rng.sample(range(rows), max(1, rows // 2))))
        table = table.take(keep)
    if rng.random() < 0.3:  # LogAppendTime for a stretch, as after a config change
        types = [int(rng.random() < 0.5)] * table.num_rows
        table = table.set_column(2, "timestamp_type", pa.array(types, pa.int8()))
    return table


def test_both_encoders_write_the_same_bytes():
    rng = random.Random(17)
    for _ in range(120):
        table = fetched_table(rng, rng.randint(1, 30))
        if rng.random() < 0.5:  # a fetch's limits slice the table; reads concatenate files
            start = rng.randrange(table.num_rows)
            table = table.slice(start, rng.randint(1, table.num_rows - start))
        if rng.random() < 0.5:
            table = pa.concat_tables([table.slice(0, 1), table.slice(1)])
        rows = table.num_rows
        expected = codec.encode_body_python(table, 0, rows)
        assert codec.EncodedBody(*native_codec.encode_records(table, 0, rows)) == expected


def test_encoded_batches_decode_to_the_fetched_records():
    rng = random.Random(18)
    table = fetched_table(rng, 50)
    batches = codec.decode_batches(encode_records(table))
    decoded = [record for batch in batches for record in batch.records.to_records()]
    assert [r.key for r in decoded] == table.column("key").to_pylist()
    assert [r.value for r in decoded] == table.column("value").to_pylist()


@pytest.mark.parametrize(
    ("records", "may_name"),
    [
        ([NewRecord(b"k", b"plain"), NewRecord(None, b"\x00abc")], False),  # too short for an id
        ([NewRecord(b"k", b"plain"), NewRecord(None, b"\x00\x00\x00\x00\x07avro")], True),
        ([NewRecord(b"\x00\x00\x00\x00\x07k", b"plain")], True),
        ([NewRecord(b"k", b"plain", headers=(("trace", b"1"),))], True),  # a header may name one
        ([NewRecord(None, None)], False),
    ],
)
def test_the_decoder_says_whether_a_record_may_name_a_schema(records, may_name):
    """Typed columns are looked for only in batches where a key or value starts with the
    wire-format prefix or a record has headers (TypedRecords.attach skips the others)."""
    decoded = native_codec.decode_records(records_section(records), len(records), 0)
    assert decoded.may_name_schemas is may_name
