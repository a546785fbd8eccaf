"""Kafka's default partitioner, checked against Kafka's own published murmur2 vectors."""

import pytest

from storage_layout.partitioner import (
    RoundRobin,
    choose_partition,
    murmur2,
    partition_for_key,
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
