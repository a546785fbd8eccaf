"""Spark finds Python data sources by module name: any top-level module named `pyspark_*` with a
`DefaultSource` is registered when a session first uses Python data sources. Installing the
lakelog wheel therefore makes `format("lakelog")` work without `register_data_source(spark)`."""

from pipeline.source import LakelogDataSource as DefaultSource

__all__ = ["DefaultSource"]
