"""The Rust Avro decoder of typed columns (native/src/avro.rs) against the Python one
(storage_layout/schemas/avro_arrow.py): the same columns for the same payloads, every Avro type
the plan covers, and hostile bytes (truncated, mutated, random) decoded to nulls, never a
crash."""

from __future__ import annotations

import datetime
import io
import random

import fastavro
import pyarrow as pa
import pytest

from storage_layout.schemas.avro_arrow import avro_decoder, avro_form
from storage_layout.schemas.avro_native import avro_plan, decode_batch

SCHEMA = {
    "type": "record",
    "name": "Everything",
    "namespace": "test",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "s", "type": "string"},
        {"name": "by", "type": "bytes"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "F", "size": 3}},
        {"name": "opt", "type": ["null", "string"]},
        {"name": "opt2", "type": ["long", "null"]},
        {"name": "arr", "type": {"type": "array", "items": "long"}},
        {"name": "m", "type": {"type": "map", "values": ["null", "double"]}},
        {
            "name": "nested",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "N",
                    "fields": [
                        {"name": "x", "type": "int"},
                        {"name": "tags", "type": {"type": "array", "items": "string"}},
                    ],
                },
            ],
        },
        {"name": "again", "type": "N"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tus", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}


def _value(rng: random.Random) -> dict:
    def nested():
        return {"x": rng.randint(-5, 5), "tags": [f"t{rng.randint(0, 9)}"] * rng.randint(0, 3)}

    return {
        "b": rng.random() < 0.5,
        "i": rng.randint(-(2**31), 2**31 - 1),
        "l": rng.randint(-(2**63), 2**63 - 1),
        "f": rng.choice([0.5, -1.25, 3.0]),
        "d": rng.random() * 1e6,
        "s": rng.choice(["", "ascii", "ünïcødé", "x" * 300]),
        "by": bytes(rng.randrange(256) for _ in range(rng.randint(0, 5))),
        "e": rng.choice("ABC"),
        "fx": bytes(rng.randrange(256) for _ in range(3)),
        "opt": rng.choice([None, "s"]),
        "opt2": rng.choice([None, 7]),
        "arr": [rng.randint(-100, 100) for _ in range(rng.randint(0, 4))],
        "m": {f"k{n}": rng.choice([None, 1.5]) for n in range(rng.randint(0, 3))},
        "nested": rng.choice([None, nested()]),
        "again": nested(),
        "ts": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
        + datetime.timedelta(milliseconds=rng.randint(0, 10**9)),
        "tus": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
        + datetime.timedelta(microseconds=rng.randint(0, 10**12)),
        "day": datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randint(-1000, 1000)),
        "u": "6f1c3b2e-4d5a-4b6c-8d7e-9f0a1b2c3d4e",
    }


@pytest.fixture(scope="module")
def parsed():
    return fastavro.parse_schema(SCHEMA)


def _encode(parsed, value) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, value)
    return out.getvalue()


def _python(parsed, payloads: list[bytes]) -> pa.Array:
    form, decode = avro_form(parsed), avro_decoder(parsed)
    values = []
    for payload in payloads:
        try:
            decoded = decode(payload)
            values.append(decoded if form.adapt is None else form.adapt(decoded))
        except ValueError:
            values.append(None)
    return pa.array(values, type=form.type)


def test_every_covered_type_decodes_as_the_python_decoder_does(parsed):
    rng = random.Random(7)
    payloads = [_encode(parsed, _value(rng)) for _ in range(300)]
    plan = avro_plan(parsed)
    assert plan is not None
    native, ok = decode_batch(plan, avro_form(parsed).type, payloads, 0)
    native.validate(full=True)
    assert all(ok)
    assert native.equals(_python(parsed, payloads))


def test_hostile_bytes_become_nulls_never_a_crash(parsed):
    rng = random.Random(11)
    good = [_encode(parsed, _value(rng)) for _ in range(50)]
    hostile = [b"", b"\xff" * 20, bytes(rng.randrange(256) for _ in range(200))]
    for payload in good:
        cut = rng.randrange(len(payload))
        hostile += [payload[:cut], payload + b"\x00"]
        mutated = bytearray(payload)
        mutated[rng.randrange(len(mutated))] ^= 1 << rng.randrange(8)
        hostile.append(bytes(mutated))
    plan = avro_plan(parsed)
    native, ok = decode_batch(plan, avro_form(parsed).type, [*hostile, *good], 0)
    native.validate(full=True)
    assert ok[-len(good) :] == [True] * len(good)
    assert not any(ok[:3])  # empty, varint overflow, noise
    python = _python(parsed, hostile).to_pylist()
    for flag, got, expected in zip(ok, native.to_pylist(), python, strict=False):
        if flag and expected is not None:
            # a uuid is kept as written; Python's decoder gives it in canonical lower case
            assert {**got, "u": got["u"].lower()} == expected
        if not flag:
            assert got is None
    # a huge block count over few bytes is refused, not looped over
    huge_block = b"\x02" + b"\xfe\xff\xff\xff\x0f"
    _, ok = decode_batch(
        ("record", [("array", ("long", 1))]),
        pa.struct([("a", pa.list_(pa.field("element", pa.int64())))]),
        [huge_block[1:]],
        0,
    )
    assert ok == [False]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "record", "name": "U", "fields": [{"name": "u", "type": ["int", "string"]}]},
        {
            "type": "record",
            "name": "D",
            "fields": [
                {
                    "name": "d",
                    "type": {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2},
                }
            ],
        },
        {"type": "record", "name": "R", "fields": [{"name": "next", "type": ["null", "R"]}]},
    ],
)
def test_what_the_plan_does_not_cover_falls_back_to_python(schema):
    assert avro_plan(fastavro.parse_schema(schema)) is None
