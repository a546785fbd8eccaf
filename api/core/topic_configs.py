"""Where a topic config's value comes from, as Kafka's admin APIs describe it: the topic's own
setting, the cluster-wide default (LAKELOG_DEFAULT_*, Kafka's log.* broker configs) or Kafka's
built-in default, with the synonyms in precedence order. Shared by the v3 HTTP configs and
the Kafka protocol's DescribeConfigs."""

from __future__ import annotations

from dataclasses import dataclass

from storage_layout.meta.catalog import TopicInfo
from storage_layout.topic_config import BROKER_NAMES, TopicConfig

DYNAMIC_TOPIC_CONFIG = "DYNAMIC_TOPIC_CONFIG"
DYNAMIC_DEFAULT_BROKER_CONFIG = "DYNAMIC_DEFAULT_BROKER_CONFIG"
DEFAULT_CONFIG = "DEFAULT_CONFIG"
_BUILTIN = TopicConfig().to_mapping()


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str
    source: str


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    name: str
    value: str
    synonyms: tuple[ConfigSynonym, ...]  # the one in force first

    @property
    def source(self) -> str:
        return self.synonyms[0].source

    @property
    def is_default(self) -> bool:
        return self.source == DEFAULT_CONFIG


def describe_configs(topic: TopicInfo) -> list[DescribedConfig]:
    return [
        DescribedConfig(name, value, synonyms(topic, name))
        for name, value in topic.config.to_mapping().items()
    ]


def synonyms(topic: TopicInfo, name: str) -> tuple[ConfigSynonym, ...]:
    broker_name = BROKER_NAMES[name]
    found = []
    if name in topic.overrides:
        found.append(ConfigSynonym(name, topic.overrides[name], DYNAMIC_TOPIC_CONFIG))
    if name in topic.defaults:
        found.append(
            ConfigSynonym(broker_name, topic.defaults[name], DYNAMIC_DEFAULT_BROKER_CONFIG)
        )
    found.append(ConfigSynonym(broker_name, _BUILTIN[name], DEFAULT_CONFIG))
    return tuple(found)
