"""One registry for every node of a root: ids unique across nodes, one id for a schema
registered on two nodes at the same moment, every schema served after a restart or by another
node (`_meta/schemas`, FORMAT.md §15)."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from api.core.schemas.registry import SchemaRegistry, SchemaRequest
from tests.integration.test_cluster import start_nodes, stop_nodes

pytestmark = pytest.mark.gateway


def _schema(name: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [{"name": "a", "type": "int"}]})


def _register_at_once(urls: list[str], jobs: list[tuple[str, str]]) -> list[dict]:
    """Each (subject, schema) job from its own thread, alternating nodes, released together."""
    barrier = threading.Barrier(len(jobs))
    answers: list[dict] = [{}] * len(jobs)

    def run(index: int, subject: str, schema: str) -> None:
        with httpx.Client(base_url=urls[index % len(urls)], timeout=60) as client:
            barrier.wait()
            response = client.post(f"/subjects/{subject}/versions", json={"schema": schema})
            answers[index] = {"status": response.status_code, **response.json()}

    threads = [
        threading.Thread(target=run, args=(i, subject, schema))
        for i, (subject, schema) in enumerate(jobs)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def test_two_nodes_share_one_registry(tmp_path):
    nodes = start_nodes(tmp_path / "data", 2)
    try:
        urls = [node.url for node in nodes]
        same = _register_at_once(urls, [(f"same-{n}-value", _schema("Same")) for n in range(6)])
        assert all(a["status"] == 200 for a in same), same
        assert len({a["id"] for a in same}) == 1

        distinct = _register_at_once(urls, [(f"d-{n}-value", _schema(f"D{n}")) for n in range(6)])
        assert all(a["status"] == 200 for a in distinct), distinct
        ids = [a["id"] for a in distinct]
        assert len(set(ids)) == 6 and same[0]["id"] not in ids

        one_subject = _register_at_once(urls, [("shared-value", _schema("Shared"))] * 4)
        assert {(a["id"], a["version"]) for a in one_subject} == {(one_subject[0]["id"], 1)}

        with httpx.Client(base_url=urls[1], timeout=30) as other:
            fresh = httpx.post(
                f"{urls[0]}/subjects/fresh-value/versions", json={"schema": _schema("Fresh")}
            ).json()
            # a node serves an id another node gave a moment ago (a deserializer's first ask)
            assert other.get(f"/schemas/ids/{fresh['id']}").status_code == 200
    finally:
        stop_nodes(nodes)

    restarted = start_nodes(tmp_path / "data", 1)
    try:
        with httpx.Client(base_url=restarted[0].url, timeout=30) as client:
            for answer in [*same, *distinct, fresh]:
                assert client.get(f"/schemas/ids/{answer['id']}").status_code == 200
            subjects = client.get("/subjects").json()
            assert {f"d-{n}-value" for n in range(6)} <= set(subjects)
    finally:
        stop_nodes(restarted)


def test_registries_racing_in_one_process_give_one_id_per_schema(tmp_path):
    """Two registries on one root (two nodes' worth of state) racing, without HTTP."""
    root = str(tmp_path / "root")
    registries = [SchemaRegistry(root), SchemaRegistry(root)]
    barrier = threading.Barrier(8)
    results: list[tuple[int, int]] = []
    lock = threading.Lock()

    def run(index: int) -> None:
        registry = registries[index % 2]
        barrier.wait()
        registered = registry.register(
            f"s{index}", SchemaRequest(_schema(f"R{index % 3}")), normalize=False
        )
        with lock:
            results.append((index % 3, registered.schema.id))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    by_schema: dict[int, set[int]] = {}
    for schema, schema_id in results:
        by_schema.setdefault(schema, set()).add(schema_id)
    assert all(len(ids) == 1 for ids in by_schema.values()), by_schema
    assert len({next(iter(ids)) for ids in by_schema.values()}) == 3
