"""The Spark session lakelog code runs on: the active one (Databricks) or a local one with Delta.

`python -m pipeline.spark` is the install-time warm-up: it builds a local session, which makes
Spark's package resolution fetch the Delta and Kafka connector jars into the Ivy cache, and
round-trips a tiny Delta table so a broken Java/Spark/Delta pairing fails at install time, not
inside a timed test.
"""

from __future__ import annotations

import os
import sys
import tempfile

import pyspark
from delta import configure_spark_with_delta_pip
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from conf.settings import Settings
from conf.spark_defaults import SESSION_CONFS, SPARK_DEFAULTS
from storage_layout import store

# Spark's own Kafka source and sink, for the same Spark and Scala versions: `format("kafka")`
# reads and writes lakelog topics through the gateway's Kafka listener.
SPARK_KAFKA_PACKAGE = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"


def build_spark_session(
    settings: Settings | None = None, app_name: str = "lakelog"
) -> SparkSession:
    """The active Spark session if there is one, else a new local session with Delta.

    An active session (a Databricks cluster's, or one a caller built) is returned as is, except
    that the runtime-settable `SESSION_CONFS` are applied to it; its static confs cannot change.
    A new session uses `settings.spark_master`, `SPARK_DEFAULTS` with
    `settings.spark_shuffle_partitions`, and the Delta jars matching the installed delta-spark
    (resolved by Spark through the Ivy cache, downloaded from Maven Central on a cold cache).
    """
    settings = settings or Settings()
    store.configure(settings.storage_options)
    _use_this_interpreter_for_workers()
    active = SparkSession.getActiveSession()
    if active is not None:
        apply_session_confs(active)
        return active
    return _build_local_session(settings, app_name)


def spark_confs(settings: Settings) -> dict[str, str]:
    """The confs a local session is built with: `SPARK_DEFAULTS` overridden by `settings`."""
    return {
        **SPARK_DEFAULTS,
        "spark.sql.shuffle.partitions": str(settings.spark_shuffle_partitions),
    }


def apply_session_confs(spark: SparkSession) -> list[str]:
    """Set `SESSION_CONFS` on `spark`; returns the keys the session refused to change.

    Tries each key instead of asking `spark.conf.isModifiable`: that answers False for keys Spark
    does not register itself (e.g. Delta's `properties.defaults.*`), which are settable.
    """
    refused = []
    for key, value in SESSION_CONFS.items():
        try:
            spark.conf.set(key, value)
        except AnalysisException:
            # Static confs, or confs a managed runtime (e.g. serverless) does not expose.
            refused.append(key)
    return refused


def _build_local_session(settings: Settings, app_name: str) -> SparkSession:
    builder = SparkSession.builder.master(settings.spark_master).appName(app_name)
    for key, value in spark_confs(settings).items():
        builder = builder.config(key, value)
    # Sets spark.jars.packages to io.delta:delta-spark_<spark major.minor>_2.13:<delta-spark>
    # and Spark's Kafka connector.
    return configure_spark_with_delta_pip(
        builder, extra_packages=[SPARK_KAFKA_PACKAGE]
    ).getOrCreate()


def _use_this_interpreter_for_workers() -> None:
    # Python workers default to `python3` on PATH, which may lack deltalake and this project;
    # the interpreter running the driver has both. Must be set before the SparkContext starts.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def _say(message: str) -> None:
    sys.stderr.write(f"[pipeline.spark] {message}\n")
    sys.stderr.flush()


def main() -> int:
    """Build a local session, write and read a 3-row Delta table, report the versions."""
    _say("starting a local Spark session (resolves the Delta and Kafka jars into the Ivy cache)")
    spark = build_spark_session()
    try:
        version = spark.version
        _say(f"spark {version} started; writing and reading a Delta table")
        with tempfile.TemporaryDirectory(prefix="lakelog-warmup-") as tmp:
            path = os.path.join(tmp, "warmup")
            spark.range(3).write.format("delta").save(path)
            rows = spark.read.format("delta").load(path).count()
        if rows != 3:
            raise RuntimeError(f"Delta round trip returned {rows} rows instead of 3")
    finally:
        spark.stop()
    sys.stdout.write(f"spark {version}, delta and kafka jars ready\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
