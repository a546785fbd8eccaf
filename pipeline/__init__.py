"""Spark side of lakelog: the session, topics read and written as DataFrames and streams shaped
like Spark's Kafka source and sink (`format("lakelog")`), the table view of a topic and group
lag. Only this package and jobs/ import pyspark.

Exports resolve lazily (PEP 562): `import pipeline` stays cheap, and `python -m pipeline.spark`
does not find its own module already imported by this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.lag import committed_offsets, group_lag
    from pipeline.read import (
        KAFKA_HEADERS_TYPE,
        KAFKA_SCHEMA,
        KAFKA_SCHEMA_WITH_HEADERS,
        read_topic,
    )
    from pipeline.source import register_data_source
    from pipeline.spark import build_spark_session
    from pipeline.topics import read_topic_stream, write_topic, write_topic_stream
    from pipeline.views import latest_by_key, register_topic_views, view_name

_EXPORTS = {
    "KAFKA_HEADERS_TYPE": "pipeline.read",
    "KAFKA_SCHEMA": "pipeline.read",
    "KAFKA_SCHEMA_WITH_HEADERS": "pipeline.read",
    "read_topic": "pipeline.read",
    "register_data_source": "pipeline.source",
    "build_spark_session": "pipeline.spark",
    "committed_offsets": "pipeline.lag",
    "group_lag": "pipeline.lag",
    "read_topic_stream": "pipeline.topics",
    "write_topic": "pipeline.topics",
    "write_topic_stream": "pipeline.topics",
    "latest_by_key": "pipeline.views",
    "register_topic_views": "pipeline.views",
    "view_name": "pipeline.views",
}

__all__ = [
    "KAFKA_HEADERS_TYPE",
    "KAFKA_SCHEMA",
    "KAFKA_SCHEMA_WITH_HEADERS",
    "build_spark_session",
    "committed_offsets",
    "group_lag",
    "latest_by_key",
    "read_topic",
    "read_topic_stream",
    "register_data_source",
    "register_topic_views",
    "view_name",
    "write_topic",
    "write_topic_stream",
]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
