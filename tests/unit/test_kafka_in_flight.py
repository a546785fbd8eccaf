"""InFlightBytes (api/kafka/listener.py): a connection's requests in flight are bounded by their
bytes, and one larger than the bound still runs, alone."""

from __future__ import annotations

import asyncio

from api.kafka.listener import InFlightBytes


def test_a_request_waits_for_room_and_a_large_one_runs_alone():
    async def scenario():
        budget, started = InFlightBytes(100), []

        async def request(name: str, size: int) -> None:
            await budget.acquire(size)
            started.append(name)

        await request("a", 60)
        waiting = asyncio.ensure_future(request("b", 60))
        await asyncio.sleep(0.01)
        assert started == ["a"]  # 120 bytes would be over the bound
        budget.release(60)
        await waiting
        budget.release(60)
        await request("huge", 500)  # nothing in flight: it runs, alone
        return started

    assert asyncio.run(scenario()) == ["a", "b", "huge"]
