"""Topic names and per-topic configuration, validated as Kafka validates them."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass

from storage_layout.errors import ConfigNotApplied, InvalidConfig, InvalidTopic
from storage_layout.schemas import subjects

TOPIC_NAME_LENGTH_MAX = 249
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> str:
    """Kafka's rules: [a-zA-Z0-9._-], 1..249 characters, not '.' or '..'."""
    if not name:
        raise InvalidTopic("Topic name is empty: use 1 to 249 characters of [a-zA-Z0-9._-].")
    if name in (".", ".."):
        raise InvalidTopic(f"Topic name '{name}' is not allowed: '.' and '..' are reserved.")
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        raise InvalidTopic(
            f"Topic name is {len(name)} characters long; the maximum is {TOPIC_NAME_LENGTH_MAX}."
        )
    if not _TOPIC_NAME.fullmatch(name):
        raise InvalidTopic(
            f"Topic name '{name}' is illegal: it may contain only ASCII letters, digits, "
            f"'.', '_' and '-'."
        )
    return name


CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
# Kafka's topic compression.type: `producer` keeps each batch's codec, `uncompressed` none, a
# codec recompresses every batch with it. lakelog stores records decoded and applies the
# codec to the batches a Kafka fetch sends (FORMAT.md §18); "none" is accepted for
# `uncompressed` (the producer-side name).
COMPRESSION_TYPES = ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")
BOOLEANS = ("true", "false")
_LONG_MAX = str(2**63 - 1)
# Kafka's topic configs that lakelog does not apply, with Kafka 4.1's defaults: it has no
# replicas, no segment or index files of its own, no local disk tier (the store keeps every
# record durably before the acknowledgement). Set to its default, one is accepted and changes
# nothing (tools and MirrorMaker copy defaults); any other value is refused with
# POLICY_VIOLATION. Kafka's record-timestamp bounds are not among them: lakelog does not check
# timestamps, which Kafka's defaults do.
UNAPPLIED_DEFAULTS = {
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.zstd.level": "3",
    "file.delete.delay.ms": "60000",
    "flush.messages": _LONG_MAX,
    "flush.ms": _LONG_MAX,
    "follower.replication.throttled.replicas": "",
    "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "",
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "max.compaction.lag.ms": _LONG_MAX,
    "min.cleanable.dirty.ratio": "0.5",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "unclean.leader.election.enable": "false",
}
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """Per-topic configuration with Kafka's names (as the `kafka_name` metadata) and defaults."""

    retention_ms: int = dataclasses.field(default=604_800_000, metadata={"min": -1})
    retention_bytes: int = dataclasses.field(default=-1, metadata={"min": -1})
    cleanup_policy: str = dataclasses.field(
        default="delete", metadata={"choices": CLEANUP_POLICIES}
    )
    segment_bytes: int = dataclasses.field(default=1_073_741_824, metadata={"min": 14})
    segment_ms: int = dataclasses.field(default=604_800_000, metadata={"min": 1})
    max_message_bytes: int = dataclasses.field(default=1_048_588, metadata={"min": 0})
    message_timestamp_type: str = dataclasses.field(
        default="CreateTime", metadata={"choices": TIMESTAMP_TYPES}
    )
    delete_retention_ms: int = dataclasses.field(default=86_400_000, metadata={"min": 0})
    min_compaction_lag_ms: int = dataclasses.field(default=0, metadata={"min": 0})
    compression_type: str = dataclasses.field(
        default="producer", metadata={"choices": COMPRESSION_TYPES}
    )
    # lakelog's own: how long `_delta_log` keeps the commits and checkpoints that Delta time
    # travel needs (versions older than this may go; Delta's delta.logRetentionDuration).
    # An hour keeps the directory small under continuous load (FORMAT.md §6b).
    delta_log_retention_ms: int = dataclasses.field(default=3_600_000, metadata={"min": 0})
    # lakelog's own: the shortest time between two commits of one partition (0: each commit
    # starts as soon as the previous one is done). Records that come sooner wait, at most this
    # long, for the next commit, and are acknowledged after it: on an object store every
    # commit is two requests (its data file and its log entry) however few records it holds.
    # At most 10 s, well within a Kafka producer's request.timeout.ms (30 s).
    delta_commit_interval_ms: int = dataclasses.field(default=0, metadata={"min": 0, "max": 10_000})
    # Confluent Server's: refuse keys/values without a valid schema id of the registry for
    # the subject the strategy names (README "Schemas").
    confluent_key_schema_validation: str = dataclasses.field(
        default="false", metadata={"choices": BOOLEANS}
    )
    confluent_value_schema_validation: str = dataclasses.field(
        default="false", metadata={"choices": BOOLEANS}
    )
    confluent_key_subject_name_strategy: str = dataclasses.field(
        default=subjects.TOPIC_NAME, metadata={"choices": subjects.STRATEGIES}
    )
    confluent_value_subject_name_strategy: str = dataclasses.field(
        default=subjects.TOPIC_NAME, metadata={"choices": subjects.STRATEGIES}
    )

    @classmethod
    def from_mapping(cls, configs: Mapping[str, object], base: TopicConfig | None = None):
        """Validate Kafka-named settings (`retention.ms`, ...) over `base` (default: defaults).

        Raises:
            InvalidConfig: an unknown name or a bad value.
            ConfigNotApplied: a config lakelog does not apply, set to other than its default.
        """
        values = {}
        for kafka_name, raw in applied_only(configs).items():
            field = _field_for(kafka_name)
            values[field.name] = _parse_value(field, kafka_name, raw)
        return dataclasses.replace(base or cls(), **values)

    def to_mapping(self) -> dict[str, str]:
        """Kafka-named settings as strings, as Kafka's admin APIs return them."""
        return {_kafka_name(f): str(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    def validates_schema(self, *, is_key: bool) -> bool:
        setting = (
            self.confluent_key_schema_validation
            if is_key
            else self.confluent_value_schema_validation
        )
        return setting == "true"

    def subject_strategy(self, *, is_key: bool) -> str:
        if is_key:
            return self.confluent_key_subject_name_strategy
        return self.confluent_value_subject_name_strategy

    @property
    def compacted(self) -> bool:
        """Key compaction keeps the latest record per key: every record needs a key."""
        return "compact" in (part.strip() for part in self.cleanup_policy.split(","))


# Kafka's broker-level names of the cluster-wide defaults: what a topic config falls back to,
# listed as its synonyms by the admin APIs.
BROKER_NAMES = {
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "compression.type": "compression.type",
    "delta.log.retention.ms": "delta.log.retention.ms",
    "delta.commit.interval.ms": "delta.commit.interval.ms",
    **{
        f"confluent.{side}.{name}": f"confluent.{side}.{name}"
        for side in ("key", "value")
        for name in ("schema.validation", "subject.name.strategy")
    },
}


def normalized(configs: Mapping[str, object]) -> dict[str, str]:
    """Kafka-named settings validated and written as Kafka returns them (strings); configs
    lakelog does not apply, set to their defaults, are left out (they change nothing).

    Raises:
        InvalidConfig: an unknown name or a bad value, with what to use instead.
    """
    mapping = TopicConfig.from_mapping(configs).to_mapping()
    return {name: mapping[name] for name in applied_only(configs)}


def applied_only(configs: Mapping[str, object]) -> dict[str, object]:
    """`configs` without the ones lakelog does not apply (UNAPPLIED_DEFAULTS) set to Kafka's
    default.

    Raises:
        ConfigNotApplied: one of those is set to anything else.
    """
    kept = {}
    for name, raw in configs.items():
        default = UNAPPLIED_DEFAULTS.get(name)
        if default is None:
            kept[name] = raw
        elif str(raw).strip().lower() != default:
            raise ConfigNotApplied(
                f"Topic config '{name}' is not applied by lakelog (it has no replicas, segment "
                f"files or local disk tier of its own: the store keeps every record before the "
                f"acknowledgement); only Kafka's default '{default}' is accepted, not '{raw}'."
            )
    return kept


def overrides_of(config: TopicConfig) -> dict[str, str]:
    """The settings of `config` that differ from the built-in defaults."""
    builtin = TopicConfig().to_mapping()
    return {name: value for name, value in config.to_mapping().items() if builtin[name] != value}


def resolved(overrides: Mapping[str, object], defaults: Mapping[str, object]) -> TopicConfig:
    """A topic's configuration: its overrides over the cluster-wide defaults over Kafka's."""
    return TopicConfig.from_mapping(overrides, base=TopicConfig.from_mapping(defaults))


def _kafka_name(field: dataclasses.Field) -> str:
    return field.name.replace("_", ".")


_FIELDS_BY_KAFKA_NAME = {_kafka_name(f): f for f in dataclasses.fields(TopicConfig)}


# Kafka's topic configs that lakelog does not keep (Kafka 4.1's TopicConfig, and the replication
# throttles its tools clear): those of UNAPPLIED_DEFAULTS, accepted at their defaults and never
# stored, and the ones Kafka checks that lakelog does not (record timestamps). Removing one is a
# no-op, as removing an unset config is in Kafka.
KAFKA_CONFIGS_NOT_KEPT = frozenset(
    {
        *UNAPPLIED_DEFAULTS,
        "message.downconversion.enable",
        "message.timestamp.after.max.ms",
        "message.timestamp.before.max.ms",
    }
)


def check_removable(kafka_name: str) -> None:
    """Raise InvalidConfig unless removing `kafka_name` means something or nothing: a config
    lakelog keeps, or one of Kafka's it does not keep (never set, so nothing to remove)."""
    if kafka_name not in KAFKA_CONFIGS_NOT_KEPT:
        check_config_name(kafka_name)


def check_config_name(kafka_name: str) -> None:
    """Raise InvalidConfig unless `kafka_name` is a supported topic config."""
    _field_for(kafka_name)


def _field_for(kafka_name: str) -> dataclasses.Field:
    try:
        return _FIELDS_BY_KAFKA_NAME[kafka_name]
    except KeyError:
        known = ", ".join(sorted(_FIELDS_BY_KAFKA_NAME))
        raise InvalidConfig(
            f"Unknown topic config '{kafka_name}'. Supported configs: {known}."
        ) from None


def _parse_value(field: dataclasses.Field, kafka_name: str, raw: object) -> object:
    if "choices" in field.metadata:
        value = str(raw).strip()
        if field.metadata["choices"] is BOOLEANS:
            value = value.lower()
        if value.replace(" ", "") not in field.metadata["choices"]:
            choices = ", ".join(field.metadata["choices"])
            raise InvalidConfig(f"Invalid value '{raw}' for '{kafka_name}': use one of {choices}.")
        return value.replace(" ", "")
    return _parse_int(kafka_name, raw, field.metadata["min"], field.metadata.get("max"))


def _parse_int(kafka_name: str, raw: object, minimum: int, maximum: int | None = None) -> int:
    if isinstance(raw, bool):
        raw = "not-a-number"
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidConfig(
            f"Invalid value '{raw}' for '{kafka_name}': expected an integer >= {minimum}."
        ) from None
    if maximum is not None and not minimum <= value <= maximum:
        raise InvalidConfig(
            f"Invalid value {value} for '{kafka_name}': it must be between {minimum} and {maximum}."
        )
    if value < minimum or value > 2**63 - 1:
        raise InvalidConfig(
            f"Invalid value {value} for '{kafka_name}': it must be >= {minimum} "
            f"and fit in a 64-bit integer."
        )
    return value
