"""The native consumer group API against a real gateway: Kafka's group protocol over HTTP
(join, sync, heartbeat, leave, commit), generations, fencing and static membership."""

from __future__ import annotations

import concurrent.futures
import time

import httpx

from tests.integration.helpers import assert_error, create_topic


def join(client: httpx.Client, group: str, topic: str, **extra) -> dict:
    body = {"topics": [topic], "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000}
    response = client.post(f"/groups/{group}/members", json=body | extra)
    assert response.status_code == 200, response.text
    return response.json()


def heartbeat(client: httpx.Client, group: str, member: dict) -> httpx.Response:
    return client.post(
        f"/groups/{group}/members/{member['member_id']}/heartbeat",
        json={"generation_id": member["generation_id"]},
    )


def partitions(member: dict) -> set[int]:
    return {p["partition"] for p in member["assignment"]}


def test_join_sync_heartbeat_commit_leave(client, topic_name):
    create_topic(client, topic_name, partitions=3)
    group = f"g-{topic_name}"
    member = join(client, group, topic_name, client_id="app")
    assert member["generation_id"] >= 1 and partitions(member) == {0, 1, 2}
    synced = client.post(
        f"/groups/{group}/members/{member['member_id']}/sync",
        json={"generation_id": member["generation_id"]},
    ).json()
    assert {p["partition"] for p in synced["assignment"]} == {0, 1, 2}
    assert heartbeat(client, group, member).status_code == 204
    commit = {
        "member_id": member["member_id"],
        "generation_id": member["generation_id"],
        "offsets": [{"topic": topic_name, "partition": 1, "offset": 7, "metadata": "m"}],
    }
    committed = client.post(f"/groups/{group}/offsets", json=commit)
    assert committed.status_code == 204, committed.text
    stored = client.get(f"/groups/{group}/offsets").json()["offsets"]
    assert [(o["partition"], o["offset"], o["metadata"]) for o in stored] == [(1, 7, "m")]
    described = client.get(f"/groups/{group}").json()
    assert described["state"] == "Stable" and len(described["members"]) == 1
    assert client.delete(f"/groups/{group}/members/{member['member_id']}").status_code == 204
    assert client.get(f"/groups/{group}").json()["state"] == "Empty"


def test_a_new_member_triggers_a_rebalance_the_others_learn_from_heartbeats(
    client, topic_name, gateway
):
    create_topic(client, topic_name, partitions=4)
    group = f"g-{topic_name}"
    first = join(client, group, topic_name)
    with (
        concurrent.futures.ThreadPoolExecutor(1) as pool,
        httpx.Client(base_url=gateway.url, timeout=30) as other,
    ):
        second_join = pool.submit(join, other, group, topic_name)
        deadline = time.monotonic() + 10
        while heartbeat(client, group, first).status_code == 204:
            assert time.monotonic() < deadline, "no REBALANCE_IN_PROGRESS"
            time.sleep(0.05)
        assert_error(heartbeat(client, group, first), 409, 40912)
        rejoined = join(client, group, topic_name, member_id=first["member_id"])
        second = second_join.result()
    assert rejoined["generation_id"] == second["generation_id"] == first["generation_id"] + 1, (
        first,
        rejoined,
        second,
    )
    assert partitions(rejoined) | partitions(second) == {0, 1, 2, 3}
    assert not partitions(rejoined) & partitions(second)
    # The old generation is fenced for heartbeats and commits.
    assert_error(heartbeat(client, group, first), 409, 40910)
    stale = {
        "member_id": first["member_id"],
        "generation_id": first["generation_id"],
        "offsets": [{"topic": topic_name, "partition": 0, "offset": 1}],
    }
    assert_error(client.post(f"/groups/{group}/offsets", json=stale), 409, 40910)


def test_unknown_members_and_admin_commits_on_an_active_group(client, topic_name):
    create_topic(client, topic_name)
    group = f"g-{topic_name}"
    member = join(client, group, topic_name)
    ghost = {"member_id": "ghost", "generation_id": member["generation_id"]}
    assert_error(heartbeat(client, group, ghost), 409, 40911)
    admin = {"offsets": [{"topic": topic_name, "partition": 0, "offset": 3}]}
    assert_error(client.post(f"/groups/{group}/offsets", json=admin), 409, 40915)
    client.delete(f"/groups/{group}/members/{member['member_id']}")
    assert client.post(f"/groups/{group}/offsets", json=admin).status_code == 204


def test_static_member_restart_keeps_generation_and_assignment(client, topic_name):
    create_topic(client, topic_name, partitions=2)
    group = f"g-{topic_name}"
    old = join(client, group, topic_name, group_instance_id="host-a")
    client.post(
        f"/groups/{group}/members/{old['member_id']}/sync",
        json={"generation_id": old["generation_id"]},
    )
    new = join(client, group, topic_name, group_instance_id="host-a")
    assert new["member_id"] != old["member_id"]
    assert new["generation_id"] == old["generation_id"]  # no rebalance
    assert partitions(new) == partitions(old) == {0, 1}
    assert_error(heartbeat(client, group, old), 409, 40913)  # the duplicate is fenced


def test_a_silent_member_is_removed_after_its_session_timeout(client, topic_name):
    create_topic(client, topic_name)
    group = f"g-{topic_name}"
    member = join(client, group, topic_name, session_timeout_ms=1000)
    deadline = time.monotonic() + 10
    while client.get(f"/groups/{group}").json().get("members"):  # 404 once empty: gone
        assert time.monotonic() < deadline, "the member never expired"
        time.sleep(0.2)
    assert_error(heartbeat(client, group, member), 409, 40911)


def test_bad_join_requests_are_rejected(client, topic_name):
    group = f"g-{topic_name}"
    neither = {"session_timeout_ms": 10_000}
    assert_error(client.post(f"/groups/{group}/members", json=neither), 422, 42212)
    short = {"topics": ["t"], "session_timeout_ms": 10}
    assert_error(client.post(f"/groups/{group}/members", json=short), 422, 42212)
    unknown = {"topics": ["t"], "assignors": ["sticky-ish"]}
    assert_error(client.post(f"/groups/{group}/members", json=unknown), 422, 42212)


def test_generations_and_timeouts_outside_kafkas_int32_are_refused(client, topic_name):
    """Found by the long fuzz run: a generation below int64's range reached the offsets
    table's int32 column and failed with a 500. Kafka's generations and group timeouts are
    int32s: anything outside is a 422 naming the field, and nothing is stored."""
    create_topic(client, topic_name)
    group = f"g-{topic_name}"
    commit = {"offsets": [{"topic": topic_name, "partition": 0, "offset": 1}]}
    for generation in (-(2**64), 2**31):
        answer = client.post(
            f"/groups/{group}/offsets", json={**commit, "generation_id": generation}
        )
        assert_error(answer, 422, 422)
        assert "generation_id" in answer.json()["message"]
    huge = {"topics": [topic_name], "session_timeout_ms": 2**40}
    assert_error(client.post(f"/groups/{group}/members", json=huge), 422, 422)
    assert client.get(f"/groups/{group}/offsets").json()["offsets"] == []  # nothing stored
    assert client.post(f"/groups/{group}/offsets", json=commit).status_code == 204  # control
    assert len(client.get(f"/groups/{group}/offsets").json()["offsets"]) == 1
