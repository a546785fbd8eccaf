"""Short forms of the `format("lakelog")` reads and writes, for notebooks and jobs.

    stream = read_topic_stream(spark, root, "orders", max_offsets_per_trigger=10_000)
    write_topic(frame, root, "audit")
    query = write_topic_stream(stream, root, "audit", checkpoint_location=ck).start()

Each is exactly the data source with Spark's Kafka option names (pipeline/source.py,
pipeline/stream.py, pipeline/write.py), so a job can move between the helper and the long form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter

from pipeline.options import storage_options_option
from pipeline.source import SOURCE_NAME, register_data_source


def read_topic_stream(
    spark: SparkSession,
    root: str,
    topics: str | Sequence[str],
    *,
    starting_offsets: str | Mapping = "latest",
    max_offsets_per_trigger: int | None = None,
    include_headers: bool = False,
    fail_on_data_loss: bool = True,
) -> DataFrame:
    """A streaming DataFrame of `topics` with Spark's Kafka source schema.

    `starting_offsets`: "latest" (Kafka's default for streams), "earliest" or Kafka's JSON
    (a string or a dict `{"orders": {"0": 23}}`); it applies only to a query's first run, a
    restarted query goes on from its checkpoint.
    """
    register_data_source(spark)
    names = [topics] if isinstance(topics, str) else list(topics)
    reader = (
        spark.readStream.format(SOURCE_NAME)
        .option("subscribe", ",".join(names))
        .option("startingOffsets", _offsets_option(starting_offsets))
        .option("includeHeaders", str(include_headers).lower())
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
        .options(**storage_options_option())
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load(root)


def write_topic(frame: DataFrame, root: str, topic: str | None = None) -> None:
    """Append `frame` (columns value [, key, headers, partition, topic, timestamp]) to `topic`
    (or to each row's `topic` when None), placed as the gateway places records."""
    register_data_source(frame.sparkSession)
    writer = frame.write.format(SOURCE_NAME).mode("append").options(**storage_options_option())
    if topic is not None:
        writer = writer.option("topic", topic)
    writer.save(root)


def write_topic_stream(
    frame: DataFrame, root: str, topic: str | None = None, *, checkpoint_location: str
) -> DataStreamWriter:
    """A configured streaming write into `topic`; add a trigger if needed and `.start()` it.
    Restarted from `checkpoint_location`, a rerun micro-batch appends nothing twice."""
    register_data_source(frame.sparkSession)
    writer = (
        frame.writeStream.format(SOURCE_NAME)
        .option("checkpointLocation", checkpoint_location)
        .option("path", root)
        .options(**storage_options_option())
    )
    return writer if topic is None else writer.option("topic", topic)


def _offsets_option(spec: str | Mapping) -> str:
    return spec if isinstance(spec, str) else json.dumps(spec)
