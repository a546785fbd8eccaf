"""Which schema ids a produce looks up (TypedRecords on a real registry in a temp root, with
batches decoded by the Kafka decoder): binary keys and values that only look like Confluent's
wire format (a zero byte first: big-endian numbers, Avro without the prefix) are told apart
by the ids they would name, with no lookup for an id no registry gives, at most one per
unknown id while it is remembered, and one trip to the registry for all of a batch's unknown
ids; a registered id still gets its typed columns."""

from __future__ import annotations

import asyncio
import json
import random
import struct

from api.core.schemas.registry import SchemaRegistry, SchemaRequest
from api.core.schemas.typed_records import TypedRecords
from api.kafka import native_codec
from storage_layout.records import NewRecord
from storage_layout.topic_config import TopicConfig
from tests.unit.test_native_codec import records_section

ORDER = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}


class CountingRegistry(SchemaRegistry):
    """The real registry, counting the lookups by id the produce path makes."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.lookups: list[int] = []
        self.trips = 0

    def schemas_by_ids(self, schema_ids):
        schema_ids = list(schema_ids)
        self.lookups.extend(schema_ids)
        self.trips += 1
        return super().schemas_by_ids(schema_ids)


def _decoded(values: list[bytes]):
    records = [NewRecord(b"k", value) for value in values]
    return native_codec.decode_records(records_section(records), len(records), 0)


def _attach(typed: TypedRecords, values: list[bytes]):
    return asyncio.run(typed.attach("orders", TopicConfig(), _decoded(values)))


def _typed_records(tmp_path) -> tuple[CountingRegistry, TypedRecords]:
    registry = CountingRegistry(str(tmp_path))
    registry.register("orders-value", SchemaRequest(json.dumps(ORDER)), normalize=False)

    async def blocking(function, *args, **kwargs):
        return function(*args, **kwargs)

    return registry, TypedRecords(registry, blocking)


def test_values_that_only_look_prefixed_cost_one_lookup_per_unknown_id(tmp_path):
    registry, typed = _typed_records(tmp_path)
    # Big-endian longs below 2**32 name id 0, which no registry gives: never looked up.
    small_numbers = [struct.pack(">q", n) for n in range(100)]
    assert _attach(typed, small_numbers).typed is None
    assert registry.lookups == []
    # A big-endian monotonic clock in nanoseconds names an id that changes every 16.7 ms:
    # each looked up once.
    clocks = [struct.pack(">Q", 12_345_678_901_234 + n * 1_000_000) for n in range(100)]
    named = {int.from_bytes(value[1:5], "big") for value in clocks}
    assert len(named) == 7
    assert _attach(typed, clocks).typed is None
    assert sorted(registry.lookups) == sorted(named)
    assert registry.trips == 1  # the seven together
    assert _attach(typed, clocks).typed is None
    assert sorted(registry.lookups) == sorted(named)  # remembered as unknown


def test_random_values_cost_one_registry_trip_a_batch(tmp_path):
    """Binary values naming more ids than the decoder lists (here 8 000 random values, 100 of
    them starting with a zero byte): the column is looked at, the ids that may be a
    registry's are looked up in one trip, and a registered id among them is still typed."""
    registry, typed = _typed_records(tmp_path)
    rng = random.Random(7)
    values = [b"\x01" + rng.randbytes(99) for _ in range(8_000)]
    for index in range(0, 8_000, 80):
        values[index] = b"\x00" + rng.randbytes(99)
    prefixed = {int.from_bytes(v[1:5], "big") for v in values if v[0] == 0}
    assert len(prefixed) > 64 and _decoded(values).named.value_ids is None
    assert _attach(typed, values).typed is None
    assert registry.trips == 1
    assert sorted(registry.lookups) == sorted(i for i in prefixed if 0 < i < 2**31)
    assert _attach(typed, values).typed is None
    assert registry.trips == 1  # remembered as unknown

    values[10] = b"\x00" + (1).to_bytes(4, "big") + b"\x0e"  # schema 1, Avro long 7
    attached = _attach(typed, values)
    assert attached.typed.column("value_fields").to_pylist()[10] == {"id": 7}
    assert attached.typed.column("value_schema_id").null_count == len(values) - 1


def test_a_registered_id_among_them_is_typed(tmp_path):
    registry, typed = _typed_records(tmp_path)
    avro_id_7 = b"\x0e"  # Avro long 7 (zigzag)
    values = [struct.pack(">q", 5), b"\x00" + (1).to_bytes(4, "big") + avro_id_7]
    attached = _attach(typed, values)
    assert attached.typed is not None
    assert attached.typed.column("value_schema_id").to_pylist() == [None, 1]
    assert attached.typed.column("value_fields").to_pylist() == [None, {"id": 7}]


def test_the_decoder_lists_at_most_sixty_four_ids_a_column(tmp_path):
    few = _decoded([b"\x00" + n.to_bytes(4, "big") + b"x" for n in (3, 3, 9)])
    assert few.named.value_ids == frozenset({3, 9})
    assert few.named.key_ids == frozenset()
    many = _decoded([b"\x00" + n.to_bytes(4, "big") + b"x" for n in range(1, 66)])
    assert many.named.value_ids is None  # not listed: the column itself is looked at
    assert many.may_name_schemas
    # 8 000 random values: ~31 start with a zero byte, listed (no pass over the column).
    rng = random.Random(7)
    random_values = _decoded([rng.randbytes(100) for _ in range(8_000)])
    assert 16 < len(random_values.named.value_ids) <= 64
