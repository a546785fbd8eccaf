"""Exactly-once consume-transform-produce within lakelog (README, "Delivery semantics").

The output records carry the input offset they came from (header `lakelog.source.offset`) and
one produce request holds a whole step's output for a partition, which lakelog commits
atomically. After a crash, the step resumes from the output's last source offset + 1 rather
than from the group's committed offset, so a crash between produce and offset commit neither
loses nor duplicates. The group commit then only records progress for lag and monitoring.
"""

from __future__ import annotations

import httpx

from tests.integration.helpers import b64, create_topic, produce, unb64

SOURCE_HEADER = "lakelog.source.offset"


def last_source_offset(client: httpx.Client, topic: str) -> int | None:
    """The input offset recorded on the output partition's last record, if any."""
    end = client.get(f"/topics/{topic}/partitions/0/offsets").json()["end_offset"]
    if end == 0:
        return None
    last = client.get(f"/topics/{topic}/partitions/0/records", params={"offset": end - 1}).json()
    headers = {h["key"]: unb64(h["value"]) for h in last[-1]["headers"]}
    return int(headers[SOURCE_HEADER])


def committed(client: httpx.Client, group: str) -> int:
    stored = client.get(f"/groups/{group}/offsets").json()["offsets"]
    return stored[0]["offset"] if stored else 0


def step(client, group, source, sink, *, crash_before_commit=False) -> int:
    """One consume-transform-produce step of up to 10 records; returns how many it read."""
    resumed = last_source_offset(client, sink)
    position = committed(client, group) if resumed is None else resumed + 1
    records = client.get(
        f"/topics/{source}/partitions/0/records", params={"offset": position, "max_bytes": 40}
    ).json()[:10]
    if not records:
        return 0
    outputs = [
        {
            "value": b64(unb64(r["value"]).upper()),
            "headers": [{"key": SOURCE_HEADER, "value": b64(str(r["offset"]))}],
        }
        for r in records
    ]
    assert produce(client, sink, outputs, partition=0).status_code == 200
    if crash_before_commit:
        return len(records)  # the process dies here: the offset commit never happens
    commit = {"offsets": [{"topic": source, "partition": 0, "offset": records[-1]["offset"] + 1}]}
    assert client.post(f"/groups/{group}/offsets", json=commit).status_code == 204
    return len(records)


def test_consume_transform_produce_is_exactly_once_across_crashes(client, topic_name):
    source, sink, group = f"{topic_name}-in", f"{topic_name}-out", f"g-{topic_name}"
    create_topic(client, source)
    create_topic(client, sink)
    inputs = [f"r{i:02d}" for i in range(35)]
    assert produce(client, source, [{"value": b64(v)} for v in inputs]).status_code == 200

    step(client, group, source, sink)
    step(client, group, source, sink, crash_before_commit=True)
    assert committed(client, group) == 10  # at-least-once would restart at 10: duplicates
    while step(client, group, source, sink, crash_before_commit=False):
        pass
    step(client, group, source, sink, crash_before_commit=True)  # a crash with nothing new

    outputs = client.get(f"/topics/{sink}/partitions/0/records", params={"offset": 0}).json()
    assert [unb64(r["value"]).decode() for r in outputs] == [v.upper() for v in inputs]
    assert committed(client, group) == len(inputs)
