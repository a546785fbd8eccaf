"""Topic configuration validation with Kafka's names, defaults and error messages."""

import pytest

from storage_layout.errors import ConfigNotApplied, InvalidConfig
from storage_layout.topic_config import TopicConfig, normalized, validate_topic_name


def test_defaults_match_kafka():
    """Unset configs take Kafka's defaults."""
    mapping = TopicConfig().to_mapping()
    assert mapping["retention.ms"] == "604800000"
    assert mapping["cleanup.policy"] == "delete"
    assert mapping["max.message.bytes"] == "1048588"
    assert mapping["message.timestamp.type"] == "CreateTime"


def test_values_are_parsed_and_round_trip():
    """Kafka-named string values become typed fields and come back as strings."""
    config = TopicConfig.from_mapping(
        {"retention.bytes": "1024", "cleanup.policy": "compact, delete", "segment.ms": 60000}
    )
    assert (config.retention_bytes, config.cleanup_policy) == (1024, "compact,delete")
    assert TopicConfig.from_mapping(config.to_mapping()) == config


@pytest.mark.parametrize(
    ("configs", "fragment"),
    [
        ({"retention.hours": "1"}, "Unknown topic config 'retention.hours'"),
        ({"retention.ms": "abc"}, "expected an integer"),
        ({"retention.ms": "-2"}, "must be >= -1"),
        ({"segment.bytes": "13"}, "must be >= 14"),
        ({"cleanup.policy": "keep"}, "use one of delete, compact"),
        ({"message.timestamp.type": "Now"}, "CreateTime, LogAppendTime"),
        ({"max.message.bytes": True}, "expected an integer"),
        ({"retention.ms": str(2**63)}, "64-bit"),
    ],
)
def test_bad_configs_say_what_to_fix(configs, fragment):
    """Unknown keys and bad values raise InvalidConfig naming the key and the allowed values."""
    with pytest.raises(InvalidConfig, match=fragment):
        TopicConfig.from_mapping(configs)


def test_kafka_configs_lakelog_does_not_apply_are_accepted_at_their_defaults_only():
    """min.insync.replicas=1 or preallocate=false change nothing here: accepted, not stored;
    other values are a POLICY_VIOLATION saying why (librdkafka's 0077 and many scripts set
    such configs at create time)."""
    defaults = {"min.insync.replicas": "1", "preallocate": "False", "retention.ms": "1000"}
    assert normalized(defaults) == {"retention.ms": "1000"}
    assert TopicConfig.from_mapping(defaults).retention_ms == 1000
    for name, value in (("min.insync.replicas", "2"), ("file.delete.delay.ms", "10000")):
        with pytest.raises(ConfigNotApplied, match=f"'{name}' is not applied") as refused:
            normalized({name: value})
        assert refused.value.code == "POLICY_VIOLATION"
    with pytest.raises(InvalidConfig, match="Unknown topic config 'message.timestamp.after"):
        normalized({"message.timestamp.after.max.ms": "3600000"})  # Kafka checks; lakelog not


def test_topic_name_rules():
    """Names follow Kafka: [a-zA-Z0-9._-], 1..249 characters, not '.' or '..'."""
    assert validate_topic_name("a.B_c-9") == "a.B_c-9"
    assert validate_topic_name("x" * 249)
