"""The storage root a bench runs on: a local directory, or a bucket of a moto S3 server that the
bench starts on loopback (and stops)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class BenchRoot:
    """`root` for `start_gateway(..., root=)` (None: its data directory) and the variables
    that reach it."""

    root: str | None
    env: dict[str, str] = field(default_factory=dict)


@contextlib.contextmanager
def bench_root(store: str, work: Path) -> Iterator[BenchRoot]:
    if store != "s3":
        yield BenchRoot(None)
        return
    from tests.s3_server import start_s3_server

    server = start_s3_server(work)
    try:
        yield BenchRoot(f"s3://{server.create_bucket()}/lakelog", server.env)
    finally:
        server.stop()
