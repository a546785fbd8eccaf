"""Every link in a v3 answer resolves (issue: operations, item 4): starting from the cluster,
follow each `related` and `self` URL of a topic, its partitions, configs, replicas,
reassignments, brokers and a consumer group, and get a 200 for each."""

from __future__ import annotations

from collections import deque

import httpx

from tests.integration.helpers import V3, b64, create_topic, produce
from tests.integration.test_consumers_v2 import new_consumer, records, subscribe

URLS_MAX = 200


def links_in(body, found: list[str]) -> list[str]:
    if isinstance(body, dict):
        for key, value in body.items():
            if key in ("related", "self", "next") and isinstance(value, str):
                found.append(value)
            else:
                links_in(value, found)
    elif isinstance(body, list):
        for item in body:
            links_in(item, found)
    return found


def test_every_v3_link_resolves(client: httpx.Client, topic_name: str):
    create_topic(client, topic_name, partitions=2)
    assert produce(client, topic_name, [{"value": b64("x")}], partition=1).status_code == 200
    group = f"{topic_name}-group"
    consumer = new_consumer(client, group)
    subscribe(client, consumer, [topic_name])
    for _ in range(5):
        if records(client, consumer):
            break
    client.post(f"{consumer}/offsets", json={})

    base = str(client.base_url).rstrip("/")
    ours = (f"/topics/{topic_name}", "/topics/-", f"/consumer-groups/{group}")
    start = [
        f"{V3}",
        f"{V3}/topics/{topic_name}",
        f"{V3}/consumer-groups/{group}",
        f"{V3}/topics/{topic_name}/partitions/1/replicas",
    ]
    queue, seen, failures = deque(base + path for path in start), set(), []
    while queue and len(seen) < URLS_MAX:
        url = queue.popleft()
        if url in seen:
            continue
        seen.add(url)
        answer = client.get(url)
        if answer.status_code != 200:
            failures.append(f"{url}: {answer.status_code} {answer.text[:200]}")
            continue
        for link in links_in(answer.json(), []):
            path = link.removeprefix(base)
            other_topic = "/topics/" in path and not any(mark in path for mark in ours)
            other_group = "/consumer-groups/" in path and f"/consumer-groups/{group}" not in path
            if link.startswith(base) and not (other_topic or other_group):
                queue.append(link)
    client.delete(consumer)
    assert not failures, failures
    kinds = {
        path.split("/v3/clusters/lakelog")[-1].split("/")[1]
        for path in seen
        if "/v3/clusters/lakelog/" in path
    }
    assert {"brokers", "topics", "consumer-groups"} <= kinds, kinds
    assert "acls" not in kinds  # linked only with LAKELOG_AUTHORIZER=acl, where it is served
    assert any(u.endswith("/replicas") for u in seen) and any("reassignment" in u for u in seen)
    assert any("/brokers/" in u for u in seen)
