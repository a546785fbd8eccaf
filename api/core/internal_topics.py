"""Kafka's internal topics as lakelog shows them: `__consumer_offsets` and `__transaction_state`.

Kafka keeps group offsets and transaction states in these topics, and its clients and tools
see them in Metadata, marked internal. lakelog keeps the same facts in `_meta/consumer_offsets`
(a Delta table: query it with Spark) and `_meta/transactions/` (FORMAT.md §11, §15), so the two
names are views: listed with their partitions, each led by the node coordinating that slot (as
FindCoordinator answers), compacted, and never written, created, deleted or read as a topic.
A catalog topic of one of these names (made before lakelog reserved them) stays an ordinary
topic and hides the view.
"""

from __future__ import annotations

import uuid

from api.core.errors import BrokerError
from storage_layout.meta.catalog import TopicInfo
from storage_layout.topic_config import resolved

COORDINATOR_TOPIC = "__consumer_offsets"
COORDINATOR_SLOTS = 50  # Kafka's offsets.topic.num.partitions: groups map to slots, slots to nodes
TRANSACTION_TOPIC = "__transaction_state"
TRANSACTION_SLOTS = 50  # Kafka's transaction.state.log.num.partitions
INTERNAL_TOPICS = {COORDINATOR_TOPIC: COORDINATOR_SLOTS, TRANSACTION_TOPIC: TRANSACTION_SLOTS}
# What Kafka sets on both (the rest are the cluster's defaults).
_OVERRIDES = {"cleanup.policy": "compact"}


class InternalTopicAccess(BrokerError):
    """A write, a read, or a change of an internal topic: lakelog keeps its content elsewhere."""

    code = "INVALID_TOPIC_EXCEPTION"

    def __init__(self, name: str) -> None:
        where = "_meta/consumer_offsets" if name == COORDINATOR_TOPIC else "_meta/transactions"
        super().__init__(
            f"'{name}' is one of Kafka's internal topics: lakelog lists it, but keeps its "
            f"content in {where} under the storage root, so it cannot be written, read or "
            "changed as a topic (group offsets: OffsetFetch, kafka-consumer-groups --describe, "
            "or Spark on the Delta table)."
        )
        self.topic = name


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS


def is_view(topic: TopicInfo) -> bool:
    """Whether `topic` is an internal topic's view (not a catalog topic of that name)."""
    return is_internal(topic.name) and topic.topic_id == _view_id(topic.name)


def internal_topic(name: str, defaults: dict[str, str]) -> TopicInfo:
    """The view of internal topic `name` as Metadata and DescribeConfigs describe it."""
    return TopicInfo(
        name,
        _view_id(name),
        0,
        INTERNAL_TOPICS[name],
        resolved(_OVERRIDES, defaults),
        overrides=dict(_OVERRIDES),
        defaults=dict(defaults),
    )


def _view_id(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"lakelog:internal:{name}"))
