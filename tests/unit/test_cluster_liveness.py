"""Node liveness and the right to lead, judged on an injected clock: time is advanced, never
slept. Two nodes share a real node registry on a local storage root."""

from __future__ import annotations

import pytest

from api.core.cluster import Cluster, ClusterSettings
from storage_layout.cluster.nodes import NodeRegistry

LEASE_MS = 10_000


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 1_000.0

    def __call__(self) -> float:
        return self.now_s

    def advance_ms(self, milliseconds: int) -> None:
        self.now_s += milliseconds / 1000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def node(tmp_path, node_id: int, clock: FakeClock) -> Cluster:
    settings = ClusterSettings(node_id, f"http://node-{node_id}", LEASE_MS, heartbeat_ms=1_000)
    return Cluster(settings, NodeRegistry(str(tmp_path)), clock=clock)


def test_a_node_that_stops_renewing_is_dead_once_a_lease_has_passed(tmp_path, clock):
    first, second = node(tmp_path, 1, clock), node(tmp_path, 2, clock)
    second.heartbeat()
    first.heartbeat()
    assert first.live_nodes() == [1, 2]

    clock.advance_ms(LEASE_MS - 1)  # the second node has not renewed since
    first.heartbeat()
    assert first.is_alive(2)

    clock.advance_ms(1)
    first.heartbeat()
    assert not first.is_alive(2) and first.live_nodes() == [1]

    second.heartbeat()  # back: a new counter seen
    first.heartbeat()
    assert first.live_nodes() == [1, 2]


def test_a_node_stops_leading_before_others_may_call_it_dead(tmp_path, clock):
    cluster = node(tmp_path, 1, clock)
    cluster.heartbeat()
    assert cluster.can_lead()
    clock.advance_ms(LEASE_MS * 8 // 10 - 1)
    assert cluster.can_lead()
    clock.advance_ms(1)  # most of a lease without a renewal: stop writing
    assert not cluster.can_lead()
    cluster.heartbeat()
    assert cluster.can_lead()


def test_a_node_that_left_is_dead_at_once_and_its_partitions_move(tmp_path, clock):
    first, second = node(tmp_path, 1, clock), node(tmp_path, 2, clock)
    second.heartbeat()
    first.heartbeat()
    partitions = [("orders", p) for p in range(32)]
    led_by_second = [key for key in partitions if first.preferred(*key) == 2]
    assert led_by_second  # rendezvous hashing spreads them over both nodes

    second.leave()
    first.heartbeat()
    assert first.live_nodes() == [1]
    assert all(first.preferred(*key) == 1 for key in led_by_second)
