"""Topics as tables (pipeline/views.py): latest_by_key against the records appended, and the
temporary views register_topic_views makes, queried with Spark SQL."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from pipeline.kafka_schema import KAFKA_SCHEMA, KAFKA_SCHEMA_WITH_HEADERS
from pipeline.read import read_topic
from pipeline.source import register_data_source
from pipeline.views import latest_by_key, register_topic_views, view_name
from storage_layout.errors import TopicNotFound
from storage_layout.log import DeltaPartitionLog
from storage_layout.meta.catalog import TopicCatalog
from storage_layout.paths import partition_table_uri
from storage_layout.records import NewRecord
from storage_layout.schema import CONTROL_ABORT
from storage_layout.topic_config import TopicConfig

pytestmark = pytest.mark.spark

CONFIG = TopicConfig()


def append(root: str, topic: str, *records: NewRecord, partition: int = 0) -> None:
    """One commit of `records` to one partition."""
    log = DeltaPartitionLog.open(partition_table_uri(root, topic, partition))
    log.append(list(records), config=CONFIG)


def records_at(spark, root: str, topic: str, *positions, include_headers: bool = False):
    """The records at (partition, offset) `positions`, exactly as read_topic returns them."""
    wanted = F.lit(False)
    for partition, offset in positions:
        wanted = wanted | ((F.col("partition") == partition) & (F.col("offset") == offset))
    return read_topic(spark, root, topic, include_headers=include_headers).where(wanted)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    """One topic per scenario; the tests here only read them."""
    path = str(tmp_path_factory.mktemp("views"))
    catalog = TopicCatalog(path)
    for name, partitions in (
        ("updates", 1),
        ("tombstones", 1),
        ("null-keys", 1),
        ("spread", 2),
        ("empty", 1),
        ("headers", 1),
    ):
        catalog.create_topic(name, partitions, CONFIG)
    # updates: offsets 0 a=1, 1 b=1 | 2 a=2 | 3 c=1, 4 a=3
    append(path, "updates", NewRecord(b"a", b"1"), NewRecord(b"b", b"1"))
    append(path, "updates", NewRecord(b"a", b"2"))
    append(path, "updates", NewRecord(b"c", b"1"), NewRecord(b"a", b"3"))
    # tombstones: 0 a=1, 1 b=1, 2 c=1 | 3 a=NULL | 4 b=NULL | 5 b=2
    append(path, "tombstones", *(NewRecord(k, b"1") for k in (b"a", b"b", b"c")))
    append(path, "tombstones", NewRecord(b"a", None))
    append(path, "tombstones", NewRecord(b"b", None))
    append(path, "tombstones", NewRecord(b"b", b"2"))
    # null-keys: 0 NULL=x, 1 a=1, 2 NULL=NULL, 3 NULL=y
    append(
        path,
        "null-keys",
        NewRecord(None, b"x"),
        NewRecord(b"a", b"1"),
        NewRecord(None, None),
        NewRecord(None, b"y"),
    )
    # spread: keys in both partitions, CreateTime given (ms)
    #   k: p0 offsets 0 (t=3000), 1 (t=1000, CreateTime going back); p1 offset 0 (t=2000)
    #   t: p0 offset 2 (t=5000); p1 offset 1 (t=5000)      -> same time: higher partition
    #   z: p0 offset 3 (t=9000); p1 offset 2 (t=100)       -> later time beats higher partition
    append(
        path,
        "spread",
        NewRecord(b"k", b"p0-superseded", 3000),
        NewRecord(b"k", b"p0-latest", 1000),
        NewRecord(b"t", b"p0", 5000),
        NewRecord(b"z", b"p0", 9000),
    )
    append(
        path,
        "spread",
        NewRecord(b"k", b"p1", 2000),
        NewRecord(b"t", b"p1", 5000),
        NewRecord(b"z", b"p1", 100),
        partition=1,
    )
    # headers: 0 a=1 (none), 1 a=2 (trace, empty=NULL), 2 b=1 (none)
    append(
        path,
        "headers",
        NewRecord(b"a", b"1"),
        NewRecord(b"a", b"2", headers=(("trace", b"t1"), ("empty", None))),
        NewRecord(b"b", b"1"),
    )
    return path


@pytest.fixture
def temp_views(spark):
    """Names of temporary views a test registers; dropped afterwards so no other test sees them."""
    views: list[str] = []
    yield views
    for view in views:
        spark.catalog.dropTempView(view)


def test_latest_record_per_key_across_appends(spark, root):
    """Each key keeps its highest-offset record, whichever commit wrote it."""
    latest = latest_by_key(spark, root, "updates")
    expected = records_at(spark, root, "updates", (0, 4), (0, 1), (0, 3))
    assert_df_equality(latest, expected, ignore_row_order=True)


def test_tombstone_removes_the_key(spark, root):
    """A key whose latest record has a NULL value is gone; the others stay."""
    keys = {row.key for row in latest_by_key(spark, root, "tombstones").collect()}
    assert b"a" not in keys
    assert b"c" in keys


def test_value_after_tombstone_brings_the_key_back(spark, root):
    """b=1, then a tombstone, then b=2: b is there again with its newest value."""
    latest = latest_by_key(spark, root, "tombstones")
    expected = records_at(spark, root, "tombstones", (0, 5), (0, 2))
    assert_df_equality(latest, expected, ignore_row_order=True)


def test_records_without_key_are_ignored(spark, root):
    """NULL keys (with a value or as tombstones) never become a row."""
    latest = latest_by_key(spark, root, "null-keys")
    assert_df_equality(latest, records_at(spark, root, "null-keys", (0, 1)), ignore_row_order=True)


def test_key_in_two_partitions(spark, root):
    """Each partition's latest record competes: greatest timestamp, then higher partition. p0's
    offset 0 (t=3000) loses although its time is the greatest: offset 1 superseded it."""
    latest = latest_by_key(spark, root, "spread")
    expected = records_at(spark, root, "spread", (1, 0), (1, 1), (0, 3))
    assert_df_equality(latest, expected, ignore_row_order=True)
    assert {row.key: row.value for row in latest.collect()} == {
        b"k": b"p1",
        b"t": b"p1",
        b"z": b"p0",
    }


def test_empty_topic_gives_an_empty_frame_with_the_kafka_schema(spark, root):
    """No records: no rows, and exactly Spark's Kafka schema (with and without headers)."""
    latest = latest_by_key(spark, root, "empty")
    assert latest.schema == KAFKA_SCHEMA
    assert latest.count() == 0
    assert latest_by_key(spark, root, "empty", include_headers=True).schema == (
        KAFKA_SCHEMA_WITH_HEADERS
    )


def test_include_headers(spark, root):
    """With include_headers each row carries its record's headers (NULL when it had none)."""
    latest = latest_by_key(spark, root, "headers", include_headers=True)
    expected = records_at(spark, root, "headers", (0, 1), (0, 2), include_headers=True)
    assert_df_equality(latest, expected, ignore_row_order=True)
    headers = {row.key: row.headers for row in latest.collect()}
    assert headers[b"b"] is None
    assert [(h.key, h.value) for h in headers[b"a"]] == [("trace", b"t1"), ("empty", None)]


def test_unknown_topic_fails_at_the_call(spark, root):
    """A missing topic raises TopicNotFound right away, not at the first action."""
    with pytest.raises(TopicNotFound):
        latest_by_key(spark, root, "missing")
    with pytest.raises(TopicNotFound):
        register_topic_views(spark, root, ["updates", "missing"])


def test_views_are_registered_and_queryable_by_sql(spark, root, temp_views):
    """Every catalog topic gets a log view and a latest view, named by view_name."""
    names = register_topic_views(spark, root)
    temp_views += names
    assert names == [
        view
        for topic in ("empty", "headers", "null-keys", "spread", "tombstones", "updates")
        for view in (view_name(topic), view_name(topic) + "_latest")
    ]
    assert_df_equality(
        spark.sql("SELECT * FROM spread"),
        read_topic(spark, root, "spread", include_headers=True),
        ignore_row_order=True,
    )
    assert_df_equality(
        spark.sql("SELECT * FROM null_keys_latest"),
        latest_by_key(spark, root, "null-keys", include_headers=True),
        ignore_row_order=True,
    )


def test_views_snapshot_at_their_first_query(spark, tmp_path, temp_views):
    """Records appended after registration are seen by the first query; later appends are not
    (Spark plans a Python data source's partitions once per relation) until views are
    registered again. Both views of a topic share that snapshot."""
    root = str(tmp_path)
    TopicCatalog(root).create_topic("orders.v1", 2, CONFIG)
    append(root, "orders.v1", NewRecord(b"a", b"1"))
    temp_views += register_topic_views(spark, root, ["orders.v1"], latest_suffix="_now")
    append(root, "orders.v1", NewRecord(b"b", b"1"), partition=1)

    def counts() -> tuple[int, int]:
        log = spark.sql("SELECT count(*) FROM orders_v1").first()[0]
        return log, spark.sql("SELECT count(*) FROM orders_v1_now").first()[0]

    assert spark.sql("SELECT count(*) FROM orders_v1").first()[0] == 2
    append(root, "orders.v1", NewRecord(b"c", b"1"))
    assert counts() == (2, 2)  # the latest view was not queried yet: same snapshot all the same
    register_topic_views(spark, root, ["orders.v1"], latest_suffix="_now")
    assert counts() == (3, 3)


def test_sql_create_temporary_view_using_lakelog(spark, root, temp_views):
    """The log view can be declared in SQL against the registered Python data source."""
    register_data_source(spark)
    temp_views.append("spread_sql")
    spark.sql(
        "CREATE OR REPLACE TEMPORARY VIEW spread_sql USING lakelog "
        f"OPTIONS (subscribe 'spread', path '{root}', includeHeaders 'true')"
    )
    assert_df_equality(
        spark.table("spread_sql"),
        read_topic(spark, root, "spread", include_headers=True),
        ignore_row_order=True,
    )


def test_view_names_are_sanitized():
    """'.' and '-' become '_'; a leading digit gets a '_' so Spark never reads a number."""
    assert view_name("orders.v1") == "orders_v1"
    assert view_name("click-stream_2") == "click_stream_2"
    assert view_name("2024.events") == "_2024_events"
    assert view_name("123") == "_123"
    assert view_name("Orders") == "Orders"


def test_keyword_and_digit_topics_register(spark, tmp_path, temp_views):
    """Topics named like an SQL keyword or a number still get usable views."""
    root = str(tmp_path)
    for name in ("select", "1e5"):
        TopicCatalog(root).create_topic(name, 1, CONFIG)
    temp_views += register_topic_views(spark, root)
    assert temp_views == ["_1e5", "_1e5_latest", "select", "select_latest"]
    assert spark.sql("SELECT count(*) FROM _1e5_latest").first()[0] == 0
    assert spark.sql("SELECT count(*) FROM `select`").first()[0] == 0


@pytest.mark.parametrize(
    ("topics", "clash"),
    [
        (["orders.v1", "orders-v1"], "orders_v1 <- 'orders.v1' (log), 'orders-v1' (log)"),
        (["a", "a_latest"], "a_latest <- 'a' (latest), 'a_latest' (log)"),
        (["Orders", "orders"], "orders <- 'Orders' (log), 'orders' (log)"),
    ],
)
def test_colliding_view_names_are_rejected(spark, tmp_path, topics, clash):
    """Two topics that would share a view name (Spark compares names case-insensitively): a
    ValueError naming both, and no view registered."""
    root = str(tmp_path)
    for name in topics:
        TopicCatalog(root).create_topic(name, 1, CONFIG)
    with pytest.raises(ValueError, match="same temporary view names") as error:
        register_topic_views(spark, root, topics)
    assert clash in str(error.value)
    assert not any(spark.catalog.tableExists(view_name(name)) for name in topics)


def test_bad_arguments(spark, root):
    """A suffix that is not an identifier, or one topic name given as a string, is refused."""
    with pytest.raises(ValueError, match="latest_suffix"):
        register_topic_views(spark, root, ["updates"], latest_suffix=".latest")
    with pytest.raises(TypeError, match="list of topic names"):
        register_topic_views(spark, root, "updates")


def test_an_aborted_or_open_write_never_becomes_a_keys_value(spark, tmp_path):
    """The table view reads read_committed: a's aborted write and b's open one are left out,
    so each key keeps its committed value; read_uncommitted shows them."""
    root = str(tmp_path)
    TopicCatalog(root).create_topic("accounts", 1, CONFIG)
    log = DeltaPartitionLog.open(partition_table_uri(root, "accounts", 0))
    log.append([NewRecord(b"a", b"100"), NewRecord(b"b", b"5")], config=CONFIG)
    log.append([NewRecord(b"a", b"-1")], config=CONFIG, producers=[(7, 0, 0, True)])
    log.append_marker(7, 0, CONTROL_ABORT, config=CONFIG)
    log.append([NewRecord(b"b", b"open")], config=CONFIG, producers=[(8, 0, 0, True)])

    def values(**options) -> dict[bytes, bytes]:
        rows = latest_by_key(spark, root, "accounts", **options).collect()
        return {bytes(row.key): bytes(row.value) for row in rows}

    assert values() == {b"a": b"100", b"b": b"5"}
    assert values(isolation_level="read_uncommitted") == {b"a": b"-1", b"b": b"open"}
