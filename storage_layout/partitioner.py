"""Choosing a partition: explicit > Kafka's murmur2 of the key > round-robin.

`murmur2` is Kafka's `Utils.murmur2` bit for bit (seed 0x9747b28c, signed 32-bit result), so a
key lands on the same partition number as with a Java Kafka producer's default partitioner:
`toPositive(murmur2(key)) % partitions`.
"""

from __future__ import annotations

import itertools
import threading

import pyarrow as pa
import pyarrow.compute as pc

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


# ---- vectorized (Arrow) -------------------------------------------------------------------

_U32 = pa.uint32()


def _u32(value: int) -> pa.Scalar:
    return pa.scalar(value, _U32)


def partitions_for_keys(keys: pa.Array, partitions: int) -> pa.Array:
    """`partition_for_key` of every key at once (int32; NULL where the key is NULL).

    Kafka's murmur2 with Arrow's integer kernels (uint32 arithmetic wraps like Java's int),
    one pass per distinct key length: the bytes of each 4-byte block are gathered with `take`
    from the keys' data buffer at each key's start offset. Accepts binary or string keys
    (large or not, sliced or not), chunked arrays too.
    """
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks()
    if pa.types.is_string(keys.type) or pa.types.is_binary(keys.type):
        keys = keys.cast(pa.binary())
    elif pa.types.is_large_string(keys.type) or pa.types.is_large_binary(keys.type):
        keys = keys.cast(pa.large_binary())
    else:
        raise TypeError(f"keys must be binary or string, not {keys.type}")
    count = len(keys)
    if count == 0:
        return pa.array([], pa.int32())
    data_buffer = keys.buffers()[2]
    data = pa.Array.from_buffers(
        pa.uint8(), 0 if data_buffer is None else data_buffer.size, [None, data_buffer]
    )
    offset_type = pa.int64() if pa.types.is_large_binary(keys.type) else pa.int32()
    offsets = pa.Array.from_buffers(offset_type, keys.offset + count, [None, keys.buffers()[1]])
    starts = pc.cast(offsets.slice(keys.offset, count), pa.int64())
    lengths = pc.binary_length(keys)
    hashed_indices: list[pa.Array] = []
    hashed: list[pa.Array] = []
    for length in pc.unique(lengths.drop_null()).to_pylist():
        rows = pc.indices_nonzero(pc.equal(lengths, length))
        hashed_indices.append(rows)
        hashed.append(_murmur2_of_length(data, pc.take(starts, rows), length))
    if not hashed:
        return pa.nulls(count, pa.int32())
    indices = pa.concat_arrays(hashed_indices)
    positive = pc.bit_wise_and(pa.concat_arrays(hashed), _u32(0x7FFFFFFF))
    chosen = pc.cast(pc.remainder(positive, _u32(partitions)), pa.int32())
    if len(indices) < count:  # NULL keys: NULL partitions, in the same scatter
        nulls = pc.indices_nonzero(pc.is_null(lengths))
        indices = pa.concat_arrays([indices, pc.cast(nulls, indices.type)])
        chosen = pa.concat_arrays([chosen, pa.nulls(len(nulls), pa.int32())])
    return pc.take(chosen, pc.sort_indices(indices))


def _murmur2_of_length(data: pa.Array, starts: pa.Array, length: int) -> pa.Array:
    """Unsigned murmur2 (uint32) of the keys of `length` bytes starting at `starts` in `data`."""

    def byte(position: int, shift: int = 0) -> pa.Array:
        gathered = pc.cast(pc.take(data, pc.add(starts, position)), _U32)
        return pc.shift_left(gathered, _u32(shift)) if shift else gathered

    m = _u32(_M)
    h = pa.repeat(_u32((_SEED ^ length) & _MASK), len(starts))
    body = length - length % 4
    for i in range(0, body, 4):
        k = pc.bit_wise_or(
            pc.bit_wise_or(byte(i), byte(i + 1, 8)),
            pc.bit_wise_or(byte(i + 2, 16), byte(i + 3, 24)),
        )
        k = pc.multiply(k, m)
        k = pc.bit_wise_xor(k, pc.shift_right(k, _u32(24)))
        k = pc.multiply(k, m)
        h = pc.bit_wise_xor(pc.multiply(h, m), k)
    remaining = length - body
    if remaining:
        if remaining >= 3:
            h = pc.bit_wise_xor(h, byte(body + 2, 16))
        if remaining >= 2:
            h = pc.bit_wise_xor(h, byte(body + 1, 8))
        h = pc.multiply(pc.bit_wise_xor(h, byte(body)), m)
    h = pc.bit_wise_xor(h, pc.shift_right(h, _u32(13)))
    h = pc.multiply(h, m)
    return pc.bit_wise_xor(h, pc.shift_right(h, _u32(15)))
