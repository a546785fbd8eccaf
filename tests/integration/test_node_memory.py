"""What a started node leaves to Python's garbage collector: the objects the start made (modules,
routes, message classes, the node's parts) live as long as the process, so they are frozen out
of the collector's full passes (a full pass walked them all, ~100 ms every 2 s under load)."""

from __future__ import annotations

import asyncio
import gc

from api.node import Node
from conf.settings import Settings


def test_a_started_node_freezes_what_its_start_made(tmp_path):
    settings = Settings(data_dir=str(tmp_path / "data"), maintenance=False)
    gc.unfreeze()

    async def started() -> tuple[int, int]:
        node = Node(settings)
        async with node.lifespan():
            frozen = gc.get_freeze_count()
            full_pass_objects = len(gc.get_objects(generation=2))
        return frozen, full_pass_objects

    try:
        frozen, full_pass_objects = asyncio.run(started())
    finally:
        gc.unfreeze()  # the rest of the test process collects as before
    assert frozen > 10_000
    assert full_pass_objects < frozen / 4
