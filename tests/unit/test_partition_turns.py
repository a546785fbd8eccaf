"""PartitionTurns (api/kafka/connection.py): a connection's produce batches go in order per
partition and only per partition."""

from __future__ import annotations

import asyncio

from api.kafka.connection import PartitionTurns


def test_batches_of_one_partition_go_in_order_and_others_do_not_wait():
    async def scenario():
        turns, order = PartitionTurns(), []
        first = turns.take(("t", 0))
        second = turns.take(("t", 0))
        other = turns.take(("t", 1))
        assert first.previous is None and other.previous is None
        assert second.previous is first.mine

        async def queue(turn, name, delay_s):
            if turn.previous is not None:
                await turn.previous
            await asyncio.sleep(delay_s)
            order.append(name)
            turns.done(turn)

        await asyncio.gather(
            queue(second, "t0 second", 0), queue(other, "t1", 0), queue(first, "t0 first", 0.05)
        )
        return order

    assert asyncio.run(scenario()) == ["t1", "t0 first", "t0 second"]


def test_a_finished_turn_leaves_nothing_behind():
    async def scenario():
        turns = PartitionTurns()
        turn = turns.take(("t", 0))
        turns.done(turn)
        turns.done(turn)  # twice is harmless (a refused batch's turn ends once more on close)
        return turns.take(("t", 0)).previous

    assert asyncio.run(scenario()) is None
