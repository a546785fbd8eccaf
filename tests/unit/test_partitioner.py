"""Kafka's default partitioner, checked against Kafka's own published murmur2 vectors."""

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_layout.partitioner import (
    RoundRobin,
    choose_partition,
    murmur2,
    partition_for_key,
    partitions_for_keys,
    to_positive,
)

# From Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java (testMurmur2).
KAFKA_MURMUR2_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("key", "expected"), KAFKA_MURMUR2_VECTORS)
def test_murmur2_matches_kafka(key, expected):
    """murmur2 equals Kafka's Utils.murmur2 on Kafka's test vectors (all tail lengths)."""
    assert murmur2(key) == expected


def test_partition_for_key_is_to_positive_murmur2_mod_partitions():
    """The partition is toPositive(murmur2(key)) % n, as Kafka's BuiltInPartitioner does."""
    assert partition_for_key(b"foobar", 7) == to_positive(-790332482) % 7
    assert to_positive(-(2**31)) == 0


def test_empty_key_hashes_like_kafka():
    """An empty (non-null) key is hashed, not round-robined (Kafka hashes b'')."""
    assert choose_partition(explicit=None, key=b"", partitions=5, round_robin=RoundRobin()) == (
        to_positive(murmur2(b"")) % 5
    )


def test_explicit_partition_wins_and_keyless_round_robins():
    """Explicit partition beats the key; null keys cycle through every partition."""
    rr = RoundRobin()
    assert choose_partition(explicit=2, key=b"21", partitions=3, round_robin=rr) == 2
    seen = [
        choose_partition(explicit=None, key=None, partitions=3, round_robin=rr) for _ in range(6)
    ]
    assert seen == [0, 1, 2, 0, 1, 2]


# ---- the vectorized partitioner ------------------------------------------------------------

PARTITION_COUNTS = [1, 2, 3, 7, 64, 2**31 - 1]


@pytest.mark.parametrize("partitions", PARTITION_COUNTS)
def test_partitions_for_keys_matches_kafka_vectors(partitions):
    """The vectorized partitioner agrees with Kafka's published murmur2 vectors."""
    keys = [key for key, _ in KAFKA_MURMUR2_VECTORS]
    expected = [to_positive(hashed) % partitions for _, hashed in KAFKA_MURMUR2_VECTORS]
    assert partitions_for_keys(pa.array(keys, pa.binary()), partitions).to_pylist() == expected


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.one_of(st.none(), st.binary(min_size=0, max_size=64)), max_size=80),
    partitions=st.sampled_from(PARTITION_COUNTS),
)
def test_partitions_for_keys_is_bit_exact_with_murmur2(keys, partitions):
    """Any keys (NULL, empty, bytes >= 0x80, every tail length): the scalar answer per key."""
    expected = [None if k is None else partition_for_key(k, partitions) for k in keys]
    got = partitions_for_keys(pa.array(keys, pa.binary()), partitions)
    assert got.type == pa.int32()
    assert got.to_pylist() == expected


@pytest.mark.parametrize("length", range(65))
def test_partitions_for_keys_every_length(length):
    """Every key length 0..64, high bytes included, in one array of mixed lengths."""
    keys = [bytes((i * 37 + j * 101 + 0x80) % 256 for j in range(length)) for i in range(5)]
    keys += [bytes(range(256 - length, 256)), bytes(length)]
    mixed = keys + [b"x" * (length % 7), None]
    expected = [None if k is None else partition_for_key(k, 13) for k in mixed]
    assert partitions_for_keys(pa.array(mixed, pa.binary()), 13).to_pylist() == expected


def test_partitions_for_keys_of_strings_slices_and_large_types():
    """String keys hash their utf-8 bytes; sliced, chunked and large arrays work too."""
    words = ["", "a", "é", "日本語キー", "foobar", None, "21"]
    expected = [None if w is None else partition_for_key(w.encode(), 5) for w in words]
    assert partitions_for_keys(pa.array(words, pa.string()), 5).to_pylist() == expected
    assert partitions_for_keys(pa.array(words, pa.large_string()), 5).to_pylist() == expected
    assert partitions_for_keys(pa.array(words).slice(2, 4), 5).to_pylist() == expected[2:6]
    chunked = pa.chunked_array([pa.array(words[:3]), pa.array(words[3:])])
    assert partitions_for_keys(chunked, 5).to_pylist() == expected
    assert partitions_for_keys(pa.array([], pa.binary()), 5).to_pylist() == []
    assert partitions_for_keys(pa.array([None, None], pa.binary()), 5).to_pylist() == [None, None]
