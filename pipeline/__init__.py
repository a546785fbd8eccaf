"""Spark side of lakelog: the session, and topics read as DataFrames shaped like Spark's Kafka
source. Only this package and jobs/ import pyspark.

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

_EXPORTS = {
    "KAFKA_HEADERS_TYPE": "pipeline.read",
    "KAFKA_SCHEMA": "pipeline.read",
    "KAFKA_SCHEMA_WITH_HEADERS": "pipeline.read",
    "read_topic": "pipeline.read",
    "register_data_source": "pipeline.source",
    "build_spark_session": "pipeline.spark",
    "committed_offsets": "pipeline.lag",
    "group_lag": "pipeline.lag",
}

__all__ = [
    "KAFKA_HEADERS_TYPE",
    "KAFKA_SCHEMA",
    "KAFKA_SCHEMA_WITH_HEADERS",
    "build_spark_session",
    "committed_offsets",
    "group_lag",
    "read_topic",
    "register_data_source",
]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
