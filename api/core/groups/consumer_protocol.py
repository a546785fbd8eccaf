"""Kafka's consumer protocol: what consumers of a "consumer"-type group put in JoinGroup's member
metadata (their subscription) and SyncGroup's assignments. The coordinator keeps both as opaque
bytes, as Kafka's does; it reads them to show subscriptions and owners (describe, lag) and to
notice when a subscribed topic grows. Layouts: ConsumerProtocolSubscription.json and
ConsumerProtocolAssignment.json in Kafka's clients (versions 0-3; later fields are ignored).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from storage_layout.records import TopicPartition

PROTOCOL_TYPE = "consumer"


class BadConsumerProtocol(ValueError):
    """Member metadata or an assignment that is not in the consumer protocol's format."""


@dataclass(frozen=True, slots=True)
class ConsumerSubscription:
    topics: tuple[str, ...]
    owned: tuple[TopicPartition, ...] = ()


def decode_subscription(data: bytes) -> ConsumerSubscription:
    reader = _Reader(data)
    version = reader.int16()
    topics = tuple(reader.string() for _ in range(reader.count()))
    reader.nullable_bytes()  # user data
    owned = _partitions(reader) if version >= 1 and reader.remaining() else ()
    return ConsumerSubscription(topics, owned)


def decode_assignment(data: bytes) -> tuple[TopicPartition, ...]:
    """The partitions of an assignment; empty bytes (a member the leader left out) is none."""
    if not data:
        return ()
    reader = _Reader(data)
    reader.int16()  # version
    return _partitions(reader)


def encode_assignment(partitions: tuple[TopicPartition, ...], version: int = 0) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    parts = [struct.pack(">hi", version, len(by_topic))]
    for topic, numbers in by_topic.items():
        name = topic.encode()
        parts.append(struct.pack(">h", len(name)) + name + struct.pack(">i", len(numbers)))
        parts.append(struct.pack(f">{len(numbers)}i", *numbers))
    parts.append(struct.pack(">i", -1))  # no user data
    return b"".join(parts)


def _partitions(reader: _Reader) -> tuple[TopicPartition, ...]:
    found = []
    for _ in range(reader.count()):
        topic = reader.string()
        found.extend(TopicPartition(topic, reader.int32()) for _ in range(reader.count()))
    return tuple(found)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = data
        self._position = 0

    def remaining(self) -> int:
        return len(self._data) - self._position

    def _take(self, fmt: str):
        try:
            (value,) = struct.unpack_from(fmt, self._data, self._position)
        except struct.error:
            raise BadConsumerProtocol("the consumer protocol data ends early") from None
        self._position += struct.calcsize(fmt)
        return value

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def count(self) -> int:
        count = self.int32()
        if count < 0 or count > self.remaining():
            raise BadConsumerProtocol(f"an array of {count} items does not fit the data")
        return count

    def string(self) -> str:
        size = self.int16()
        if size < 0 or size > self.remaining():
            raise BadConsumerProtocol(f"a {size}-byte string does not fit the data")
        text = self._data[self._position : self._position + size].decode("utf-8", "replace")
        self._position += size
        return text

    def nullable_bytes(self) -> bytes | None:
        size = self.int32()
        if size < 0:
            return None
        if size > self.remaining():
            raise BadConsumerProtocol(f"{size} bytes of user data do not fit the data")
        data = self._data[self._position : self._position + size]
        self._position += size
        return data
