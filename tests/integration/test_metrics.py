"""`GET /metrics` on a real gateway: Prometheus text that parses, with the records produced
and fetched per topic (over HTTP and Kafka's protocol alike), commits, partitions led, requests
per route template (never a raw path) and per Kafka API, and errors by code."""

from __future__ import annotations

import httpx
import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.helpers import b64, create_topic, produce
from tests.integration.test_cluster import wait_for

pytestmark = pytest.mark.gateway


def samples(client: httpx.Client) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    found = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: dict, name: str, **labels) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_count_what_this_node_did(kafka_gateway, topic_name):
    client = httpx.Client(base_url=kafka_gateway.url, timeout=30)
    create_topic(client, topic_name, partitions=2)
    before = samples(client)
    records = [{"value": b64(f"v{n}"), "partition": n % 2} for n in range(6)]
    assert produce(client, topic_name, records).status_code == 200
    producer = Producer({"bootstrap.servers": kafka_gateway.kafka_address})
    for n in range(4):
        producer.produce(topic_name, value=f"k{n}".encode(), partition=0)
    assert producer.flush(30) == 0
    fetched = client.get(f"/topics/{topic_name}/partitions/1/records", params={"offset": 0})
    assert len(fetched.json()) == 3
    assert client.get("/topics/no-such-topic").status_code == 404
    after = samples(client)

    produced = value(after, "lakelog_produced_records_total", topic=topic_name)
    assert produced - value(before, "lakelog_produced_records_total", topic=topic_name) == 10
    assert value(after, "lakelog_produced_bytes_total", topic=topic_name) >= 10 * 2
    assert value(after, "lakelog_fetched_records_total", topic=topic_name) == 3
    assert value(after, "lakelog_commit_records_count") > value(
        before, "lakelog_commit_records_count"
    )
    assert value(after, "lakelog_partitions_led") >= 2
    route = "/topics/{topic}/partitions/{partition}/records"
    assert value(after, "lakelog_http_requests_total", route=route, method="GET", status="200") >= 1
    assert value(after, "lakelog_http_request_seconds_count", route=route, method="GET") >= 1
    assert not any(topic_name in dict(labels).get("route", "") for _, labels in after)
    assert value(after, "lakelog_kafka_requests_total", api="Produce") >= 1
    assert value(after, "lakelog_http_errors_total", error_code="40401") >= 1
    assert value(after, "lakelog_leadership_changes_total", change="taken") >= 2


def test_group_lag_and_rebalances(kafka_gateway, topic_name):
    client = httpx.Client(base_url=kafka_gateway.url, timeout=30)
    create_topic(client, topic_name)
    assert (
        produce(client, topic_name, [{"value": b64(f"v{n}")} for n in range(5)]).status_code == 200
    )
    group = f"{topic_name}-g"
    commit = {"offsets": [{"topic": topic_name, "partition": 0, "offset": 2}]}
    assert client.post(f"/groups/{group}/offsets", json=commit).status_code == 204
    before = value(samples(client), "lakelog_group_rebalances_total")
    v2 = {"Content-Type": "application/vnd.kafka.v2+json"}
    created = client.post(f"/consumers/{group}", json={"name": "c1"}, headers=v2)
    assert created.status_code == 200, created.text
    subscription = {"topics": [topic_name]}
    path = f"/consumers/{group}/instances/c1"
    assert client.post(f"{path}/subscription", json=subscription).status_code == 204
    client.get(f"{path}/records", params={"timeout": 500})  # joins: a rebalance completes
    labels = {"group": group, "topic": topic_name, "partition": "0"}
    wait_for(  # the next lag sample
        lambda: value(samples(client), "lakelog_consumer_group_lag", **labels) > 0, 30, "a sample"
    )
    after = samples(client)
    lag = value(after, "lakelog_consumer_group_lag", **labels)
    assert lag == 3  # committed 2 of 5
    assert value(after, "lakelog_group_rebalances_total") > before
    client.delete(path)
