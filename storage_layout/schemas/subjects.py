"""Subject name strategies, as Confluent's serializers name subjects: TopicNameStrategy
(`<topic>-key`, `<topic>-value`, the default), RecordNameStrategy (the record's full name) and
TopicRecordNameStrategy (`<topic>-<record full name>`)."""

from __future__ import annotations

TOPIC_NAME = "io.confluent.kafka.serializers.subject.TopicNameStrategy"
RECORD_NAME = "io.confluent.kafka.serializers.subject.RecordNameStrategy"
TOPIC_RECORD_NAME = "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"
STRATEGIES = (TOPIC_NAME, RECORD_NAME, TOPIC_RECORD_NAME)
KEY_SUFFIX, VALUE_SUFFIX = "-key", "-value"


def topic_subject(topic: str, *, is_key: bool) -> str:
    """TopicNameStrategy's subject of a topic's keys or values."""
    return topic + (KEY_SUFFIX if is_key else VALUE_SUFFIX)


def topic_of(subject: str) -> str | None:
    """The topic a TopicNameStrategy subject names (`orders-value` -> `orders`), else None."""
    for suffix in (KEY_SUFFIX, VALUE_SUFFIX):
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[: -len(suffix)]
    return None
