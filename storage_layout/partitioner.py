"""Choosing a partition: explicit > Kafka's murmur2 of the key > round-robin.

`murmur2` is Kafka's `Utils.murmur2` bit for bit (seed 0x9747b28c, signed 32-bit result), so a
key lands on the same partition number as with a Java Kafka producer's default partitioner:
`toPositive(murmur2(key)) % partitions`.
"""

from __future__ import annotations

import itertools
import threading

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 hash of `data`, as a signed Java int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    body = length - length % 4
    for i in range(0, body, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    h = _mix_tail(h, data[body:])
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def _mix_tail(h: int, tail: bytes) -> int:
    remaining = len(tail)
    if remaining == 0:
        return h
    if remaining >= 3:
        h ^= tail[2] << 16
    if remaining >= 2:
        h ^= tail[1] << 8
    h ^= tail[0]
    return (h * _M) & _MASK


def to_positive(number: int) -> int:
    """Kafka's `Utils.toPositive`: clears the sign bit (not abs(), which differs for MIN_VALUE)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, partitions: int) -> int:
    return to_positive(murmur2(key)) % partitions


class RoundRobin:
    """Spreads keyless records over partitions, one after the other. Thread-safe."""

    def __init__(self) -> None:
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def next_partition(self, partitions: int) -> int:
        with self._lock:
            return next(self._counter) % partitions


def choose_partition(
    *, explicit: int | None, key: bytes | None, partitions: int, round_robin: RoundRobin
) -> int:
    """Explicit partition if given, else murmur2 of a non-null key, else round-robin."""
    if explicit is not None:
        return explicit
    if partitions == 1:
        return 0  # no choice to make: skip hashing (it is most of routing's cost)
    if key is not None:
        return partition_for_key(key, partitions)
    return round_robin.next_partition(partitions)
