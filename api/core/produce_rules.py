"""The topic's rules a produce must pass before anything is queued, written once for every
front-end: HTTP checks them per record (a bad record fails alone), the Kafka protocol per
record batch (the batch fails whole). The partition's existence is TopicInfo.check_partition.
"""

from __future__ import annotations

from api.core.errors import KeyRequired, RecordTooLarge
from storage_layout.meta.catalog import TopicInfo
from storage_layout.records import Records, keyless_indexes


def check_size(topic: TopicInfo, size_bytes: int, *, index: int = 0) -> None:
    """max.message.bytes: a record (HTTP) or a record batch (Kafka, as Kafka counts it).

    Raises:
        RecordTooLarge: `size_bytes` is above the topic's limit.
    """
    limit = topic.config.max_message_bytes
    if size_bytes > limit:
        raise RecordTooLarge(index=index, size_bytes=size_bytes, limit_bytes=limit)


def check_key(topic: TopicInfo, key: bytes | None, *, index: int) -> None:
    """A compacted topic keeps the latest record per key: every record needs one.

    Raises:
        KeyRequired: `key` is None and the topic is compacted.
    """
    if key is None and topic.config.compacted:
        raise KeyRequired(topic=topic.name, indexes=(index,))


def check_keys(topic: TopicInfo, records: Records) -> None:
    """check_key for every record of a batch: KeyRequired names every record without one
    (Kafka's ProduceResponse lists each in `record_errors`, and clients fail those records
    with INVALID_RECORD, the others of the batch with INVALID_DIFFERENT_RECORD)."""
    if topic.config.compacted and (keyless := keyless_indexes(records)):
        raise KeyRequired(topic=topic.name, indexes=tuple(keyless))
