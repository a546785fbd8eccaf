"""Spark configuration lakelog relies on (plain data: no pyspark import here).

`SPARK_DEFAULTS` is what a local session is built with (`pipeline.build_spark_session`).
`SESSION_CONFS` is the subset lakelog also sets on a session it did not build (e.g. a
Databricks cluster's): confs that change results, not tuning for a 2-core machine.
"""

from __future__ import annotations

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"

# Runtime-settable confs that matter for correctness; applied to any session, ours or not.
SESSION_CONFS: dict[str, str] = {
    # Record timestamps are UTC instants (FORMAT.md); rendering and casting them to
    # strings or dates in UTC keeps job output the same on every machine.
    "spark.sql.session.timeZone": "UTC",
    # deltalake 1.6.6 cannot read tables with deletion vectors through pyarrow
    # (delta_facts §5), so a Spark DELETE on a partition table must never turn them on.
    "spark.databricks.delta.properties.defaults.enableDeletionVectors": "false",
    # Spark writes timestamps as INT96 by default; a Spark job rewriting partition files
    # (OPTIMIZE, compact_keys) must keep them int64 microseconds like deltalake writes them.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}

# Confs only for sessions lakelog builds itself (static ones, or tuning for small local runs
# that would hurt a real cluster).
LOCAL_CONFS: dict[str, str] = {
    # Delta as a data source and `delta.`path`` SQL; static, so set before the session starts.
    "spark.sql.extensions": DELTA_EXTENSION,
    "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
    # 2-core machines: the default 200 shuffle partitions make every small job slow
    # (`Settings.spark_shuffle_partitions` overrides this value).
    "spark.sql.shuffle.partitions": "4",
    # Delta rebuilds table state with 50 partitions by default; tiny tables need few.
    "spark.databricks.delta.snapshotPartitions": "2",
    # No web UI: nobody looks at it in tests and jobs, and it binds a port.
    "spark.ui.enabled": "false",
    # The console progress bar garbles test and CLI output on stderr.
    "spark.ui.showConsoleProgress": "false",
}

SPARK_DEFAULTS: dict[str, str] = {**LOCAL_CONFS, **SESSION_CONFS}
