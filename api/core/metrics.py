"""The node's Prometheus metrics (served by `GET /metrics`, README "Metrics").

One registry per process (a gateway process is one node). Label values are bounded: `topic`
by the topics that exist, `route` by the HTTP route templates (never raw paths), `api` by the
Kafka APIs served, `status` and `error_code` by the codes the gateway answers with.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from storage_layout.store import stats as store_stats

REGISTRY = CollectorRegistry(auto_describe=True)

# Request latencies: 0.5 ms to 30 s (long polls end at their timeout).
_LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0
)  # fmt: skip
_COMMIT_BUCKETS_S = (0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 1.0)
_RECORDS_BUCKETS = (1, 10, 100, 1_000, 10_000, 100_000)

PRODUCED_RECORDS = Counter(
    "lakelog_produced_records",
    "Records committed to partitions this node leads (every front-end).",
    ["topic"],
    registry=REGISTRY,
)
PRODUCED_BYTES = Counter(
    "lakelog_produced_bytes",
    "Key and value bytes of the records committed.",
    ["topic"],
    registry=REGISTRY,
)
TYPED_DECODE_FAILURES = Counter(
    "lakelog_typed_decode_failures",
    "Keys and values naming a registered schema that did not decode (stored untyped).",
    registry=REGISTRY,
)
FETCHED_RECORDS = Counter(
    "lakelog_fetched_records",
    "Records returned by fetches served by this node (leader or follower reads).",
    ["topic"],
    registry=REGISTRY,
)
FETCHED_BYTES = Counter(
    "lakelog_fetched_bytes",
    "Key and value bytes of the records fetched.",
    ["topic"],
    registry=REGISTRY,
)
COMMIT_SECONDS = Histogram(
    "lakelog_commit_seconds",
    "Time of one group commit of a partition (data file and Delta commit).",
    buckets=_COMMIT_BUCKETS_S,
    registry=REGISTRY,
)
COMMIT_RECORDS = Histogram(
    "lakelog_commit_records",
    "Records per group commit.",
    buckets=_RECORDS_BUCKETS,
    registry=REGISTRY,
)
PARTITIONS_LED = Gauge(
    "lakelog_partitions_led",
    "Partitions this node leads now.",
    registry=REGISTRY,
)
HTTP_REQUESTS = Counter(
    "lakelog_http_requests",
    "HTTP requests answered, by route template, method and status.",
    ["route", "method", "status"],
    registry=REGISTRY,
)
HTTP_REQUEST_SECONDS = Histogram(
    "lakelog_http_request_seconds",
    "HTTP request latency by route template and method.",
    ["route", "method"],
    buckets=_LATENCY_BUCKETS_S,
    registry=REGISTRY,
)
HTTP_ERRORS = Counter(
    "lakelog_http_errors",
    "HTTP error answers by Confluent error code.",
    ["error_code"],
    registry=REGISTRY,
)
KAFKA_REQUESTS = Counter(
    "lakelog_kafka_requests",
    "Kafka protocol requests answered, by API.",
    ["api"],
    registry=REGISTRY,
)
KAFKA_REQUEST_SECONDS = Histogram(
    "lakelog_kafka_request_seconds",
    "Kafka protocol request latency by API.",
    ["api"],
    buckets=_LATENCY_BUCKETS_S,
    registry=REGISTRY,
)


LEADERSHIP_CHANGES = Counter(
    "lakelog_leadership_changes",
    "Partitions this node took the lead of (taken), handed over (handed) or was deposed from "
    "by another node (lost).",
    ["change"],
    registry=REGISTRY,
)
GROUP_REBALANCES = Counter(
    "lakelog_group_rebalances",
    "Rebalances completed by the groups this node coordinates (a new generation each).",
    registry=REGISTRY,
)
JOB_RUNS = Counter(
    "lakelog_job_runs",
    "Scheduled maintenance runs on partitions, by job and outcome (committed, nothing, failed).",
    ["job", "outcome"],
    registry=REGISTRY,
)
JOB_RECORDS_REMOVED = Counter(
    "lakelog_job_records_removed",
    "Records removed by retention and key compaction, by job.",
    ["job"],
    registry=REGISTRY,
)
JOB_BYTES_REMOVED = Counter(
    "lakelog_job_bytes_removed",
    "Parquet bytes removed by maintenance, by job.",
    ["job"],
    registry=REGISTRY,
)


# (group, topic, partition, lag) of the committed offsets of the groups this node coordinates,
# without I/O (the lag history's latest sample)
LagSource = Callable[[], Iterable[tuple[str, str, int, int]]]


class _GroupLag(Collector):
    """`lakelog_consumer_group_lag`, read at each scrape from the node's own state."""

    def __init__(self) -> None:
        self.source: LagSource = lambda: ()

    def collect(self):
        family = GaugeMetricFamily(
            "lakelog_consumer_group_lag",
            "Offsets between a group's committed offset and the partition's last stable "
            "offset, for every committed partition of the groups this node coordinates (the "
            "latest lag sample).",
            labels=["group", "topic", "partition"],
        )
        for group, topic, partition, lag in self.source():
            family.add_metric([group, topic, str(partition)], lag)
        yield family


GROUP_LAG = _GroupLag()
REGISTRY.register(GROUP_LAG)


# (group, topic, partition, start offset, {state: records}) of the share partitions this node
# holds, without I/O
ShareSource = Callable[[], Iterable[tuple[str, str, int, int, dict[str, int]]]]


class _SharePartitions(Collector):
    """`lakelog_share_records` and `lakelog_share_start_offset`, read at each scrape from the
    share partitions this node leads (api/core/shares/owner.py)."""

    def __init__(self) -> None:
        self.source: ShareSource = lambda: ()

    def collect(self):
        records = GaugeMetricFamily(
            "lakelog_share_records",
            "In-flight records of each share partition this node leads, by state (available, "
            "acquired, acknowledged, archived; an expired lock counts as available).",
            labels=["group", "topic", "partition", "state"],
        )
        starts = GaugeMetricFamily(
            "lakelog_share_start_offset",
            "Share-partition start offset: every record before it is settled.",
            labels=["group", "topic", "partition"],
        )
        for group, topic, partition, start, counts in self.source():
            starts.add_metric([group, topic, str(partition)], start)
            for state, count in counts.items():
                records.add_metric([group, topic, str(partition), state], count)
        yield records
        yield starts


SHARE_PARTITIONS = _SharePartitions()
REGISTRY.register(SHARE_PARTITIONS)
SHARE_ACQUIRED = Counter(
    "lakelog_share_acquired_records",
    "Records acquired by share group members (each delivery counts).",
    ["group"],
    registry=REGISTRY,
)
SHARE_ACKNOWLEDGED = Counter(
    "lakelog_share_acknowledged_records",
    "Records acknowledged by share group members, by type (accept, release, reject, renew).",
    ["group", "type"],
    registry=REGISTRY,
)
SHARE_ARCHIVED = Counter(
    "lakelog_share_archived_records",
    "Delivered records archived, by reason (rejected, delivery-limit).",
    ["group", "reason"],
    registry=REGISTRY,
)


class _StoreRequests(Collector):
    """`lakelog_store_requests`, from the storage layer's own counts (it knows no Prometheus).
    Labels: `store` (s3, azure, gcs, local, local-exclusive-create), `operation`
    (put_if_absent, put, get, head, list, delete), `outcome` (ok, error)."""

    def collect(self):
        family = CounterMetricFamily(
            "lakelog_store_requests",
            "Object-store requests of lakelog's own storage layer in this process (a listing "
            "page, a batch of deletes; delta-rs I/O excluded; on a local disk, calls of the "
            "store), by store, "
            "operation and outcome (error: failed after the client's retries).",
            labels=["store", "operation", "outcome"],
        )
        for (store, operation, outcome), count in sorted(store_stats.request_counts().items()):
            family.add_metric([store, operation, outcome], count)
        yield family


REGISTRY.register(_StoreRequests())


# Label lookups take a lock and build a key: the hot paths bind each series once. Every cache
# below is as bounded as its labels.


class _TopicSeries(NamedTuple):
    produced_records: Counter
    produced_bytes: Counter
    fetched_records: Counter
    fetched_bytes: Counter


@functools.cache
def _topic_series(topic: str) -> _TopicSeries:
    metrics = (PRODUCED_RECORDS, PRODUCED_BYTES, FETCHED_RECORDS, FETCHED_BYTES)
    return _TopicSeries(*(metric.labels(topic) for metric in metrics))


@functools.cache
def _http_series(route: str, method: str, status: int) -> tuple:
    count = HTTP_REQUESTS.labels(route, method, str(status))
    return count, HTTP_REQUEST_SECONDS.labels(route, method)


@functools.cache
def _kafka_series(api: str) -> tuple:
    return KAFKA_REQUESTS.labels(api), KAFKA_REQUEST_SECONDS.labels(api)


def record_commit(topic: str, records: int, size_bytes: int, seconds: float) -> None:
    """One group commit of `records` records to a partition of `topic`."""
    series = _topic_series(topic)
    series.produced_records.inc(records)
    series.produced_bytes.inc(size_bytes)
    COMMIT_SECONDS.observe(seconds)
    COMMIT_RECORDS.observe(records)


def record_fetch(topic: str, records: int, size_bytes: int) -> None:
    if records:
        series = _topic_series(topic)
        series.fetched_records.inc(records)
        series.fetched_bytes.inc(size_bytes)


def record_http_request(route: str, method: str, status: int, seconds: float) -> None:
    """One HTTP answer (`route`: the route template; `method`: one of a bounded set)."""
    count, latency = _http_series(route, method, status)
    count.inc()
    latency.observe(seconds)


def record_kafka_request(api: str, seconds: float) -> None:
    count, latency = _kafka_series(api)
    count.inc()
    latency.observe(seconds)


def forget_topic(topic: str) -> None:
    """A deleted topic's series go (label values stay bounded by the topics that exist)."""
    _topic_series.cache_clear()  # a topic made again under the name gets new series
    for metric in (PRODUCED_RECORDS, PRODUCED_BYTES, FETCHED_RECORDS, FETCHED_BYTES):
        try:
            metric.remove(topic)
        except KeyError:
            pass
