"""`spark.read.format("lakelog")`: a Python Data Source with the options of Spark's Kafka source.

    register_data_source(spark)
    spark.read.format("lakelog").option("subscribe", "orders").load("/data/lakelog")

Options (Spark's Kafka source names): exactly one of `subscribe` (comma-separated topics),
`subscribePattern` (a Java-style regex over topic names) and `assign` (JSON
`{"orders": [0, 1]}`); `startingOffsets` and `endingOffsets` ("earliest", "latest", or JSON
`{"orders": {"0": 23, "1": -2}}`, -2 earliest, -1 latest, ending exclusive); `includeHeaders`;
`startingTimestamp` / `startingOffsetsByTimestamp` and `endingTimestamp` /
`endingOffsetsByTimestamp` (epoch ms, taking precedence over the offsets options);
`failOnDataLoss` (default true: a starting offset below a partition's log_start_offset is an
error; false: read from log_start_offset); `kafka.isolation.level` (read_uncommitted, the
default: every data record; read_committed: records of aborted transactions left out, and
"latest" is the last stable offset, so an open transaction's records wait until it ends); the
storage root as `path` (or `.load(root)`). Transaction markers are never rows.
The schema is exactly Spark's Kafka source schema. `spark.readStream.format("lakelog")` reads
topics as streams with the same options and planning (pipeline/stream.py).

How it reads: the driver resolves each topic partition's offset range and the Parquet files that
hold it from the partition's Delta log (one snapshot each, so the read is repeatable), and cuts
the files into input partitions of about RECORDS_PER_SPLIT records; executors read just those
files with pyarrow (no Delta log replay, no copy) and keep the offsets in range. Executors need
the `lakelog` wheel and `deltalake`/`pyarrow` installed (on Databricks: the bundle's libraries).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from pipeline.kafka_schema import kafka_schema, typed_arrow_types
from pipeline.options import (
    EARLIEST,
    LATEST,
    TYPED_COLUMNS_OPTION,
    adopt_storage_options,
    flag,
    isolation_of,
    lowercase,
    offsets_option,
    root_of,
    topic_partitions,
)
from pipeline.splits import OffsetSplit, by_timestamp, partition_splits, read_split
from pipeline.stream import LakelogStreamReader
from storage_layout import paths
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.schemas.typed_columns import TYPED_COLUMNS, merge_types

SOURCE_NAME = "lakelog"


def register_data_source(spark: SparkSession) -> None:
    """Make `format("lakelog")` available in this Spark session (idempotent)."""
    try:
        spark.dataSource.register(LakelogDataSource)
    except AnalysisException as error:
        # Spark 4.0 refuses to register a name twice, including over the registration it
        # made itself from the installed `pyspark_lakelog` module; 4.1+ replaces it.
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(error):
            raise


class LakelogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        """Spark's Kafka source schema; with `typedColumns=true`, also the typed columns
        (FORMAT.md §17) the topics' partition tables have now, merged."""
        include_headers = flag(self.options, "includeHeaders", False)
        if not flag(self.options, TYPED_COLUMNS_OPTION, False):
            return kafka_schema(include_headers=include_headers)
        adopt_storage_options(self.options)
        return kafka_schema(include_headers=include_headers, typed=typed_types(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        adopt_storage_options(self.options)
        return LakelogBatchReader(lowercase(self.options), typed_arrow_types(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        adopt_storage_options(self.options)
        return LakelogStreamReader(lowercase(self.options), typed_arrow_types(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pipeline.write import LakelogWriter, WriteOptions

        adopt_storage_options(self.options)
        return LakelogWriter(WriteOptions.parse(self.options, schema, overwrite=overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pipeline.write import LakelogStreamWriter, WriteOptions

        adopt_storage_options(self.options)
        return LakelogStreamWriter(WriteOptions.parse(self.options, schema, overwrite=overwrite))


def typed_types(options: Mapping[str, str]) -> dict[str, pa.DataType]:
    """The typed columns of every partition table a read covers, merged (a column's type
    where partitions conflict: the first's, as within one table)."""
    root = root_of(lowercase(options))
    catalog = TopicCatalog(root)
    merged: dict[str, pa.DataType] = {}
    for topic, partitions in topic_partitions(lowercase(options), catalog).items():
        for partition in sorted(partitions):
            uri = paths.partition_table_uri(root, topic, partition)
            for name, kind in DeltaPartitionLog.open(uri).snapshot.typed_types.items():
                merged[name] = merge_types(merged.get(name), kind).type
    return {name: merged[name] for name in TYPED_COLUMNS if name in merged}


class LakelogBatchReader(DataSourceReader):
    def __init__(
        self, options: Mapping[str, str], typed: Mapping[str, pa.DataType] | None = None
    ) -> None:
        self._committed = isolation_of(options).needs_index
        self._options = lowercase(options)
        self._include_headers = flag(options, "includeHeaders", False)
        self._typed = dict(typed or {})

    def partitions(self) -> list[OffsetSplit]:
        root = root_of(self._options)
        catalog = TopicCatalog(root)
        splits: list[OffsetSplit] = []
        for topic, partitions in topic_partitions(self._options, catalog).items():
            starts = offsets_option(
                self._options, "startingOffsets", topic, partitions, ending=False
            )
            ends = offsets_option(self._options, "endingOffsets", topic, partitions, ending=True)
            for partition in sorted(partitions):
                uri = paths.partition_table_uri(root, topic, partition)
                log = DeltaPartitionLog.open(uri)
                start, end = by_timestamp(
                    self._options,
                    log,
                    topic,
                    partition,
                    start=starts.get(partition, EARLIEST),
                    end=ends.get(partition, LATEST),
                )
                splits += partition_splits(
                    log,
                    topic=topic,
                    partition=partition,
                    table_uri=uri,
                    start=start,
                    end=end,
                    fail_on_data_loss=flag(self._options, "failOnDataLoss", True),
                    committed=self._committed,
                )
        return splits

    def read(self, partition: OffsetSplit) -> Iterator[pa.RecordBatch]:
        return read_split(partition, include_headers=self._include_headers, typed=self._typed)
