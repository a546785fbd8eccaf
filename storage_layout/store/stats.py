"""Counts of object-store requests by store kind, operation and outcome, for the gateway's
metrics (`lakelog_store_requests`). The storage layer knows nothing of Prometheus: the api layer
reads `request_counts()` at each scrape.

A request is one request of lakelog's own `Store` (a page of a listing, a batch of up to 1,000
deletes; obstore's retries inside one are not counted again). On a local disk a request is one
call of the store (a whole-file write, a listing of a directory): what bench/commit_cost.py
counts per commit. The Delta reads and writes that
go through delta-rs (Spark jobs, table loads for Spark) are not counted.

Outcomes: "ok" (including "not found" answers and a conditional create that lost to an
existing object, which are answers, not failures) and "error" (a StoreError reached the caller:
throttling past the retries, timeouts, refused credentials).
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from storage_layout.store.base import StoreError

OK = "ok"
ERROR = "error"

_lock = threading.Lock()
_counts: Counter[tuple[str, str, str]] = Counter()

Method = TypeVar("Method", bound=Callable)


def record(kind: str, operation: str, outcome: str) -> None:
    with _lock:
        _counts[(kind, operation, outcome)] += 1


def request_counts() -> dict[tuple[str, str, str], int]:
    """{(store kind, operation, outcome): requests} since the process started."""
    with _lock:
        return dict(_counts)


def counted(operation: str) -> Callable[[Method], Method]:
    """Count each call of a store method (`self.kind` names the store) by its outcome."""

    def wrap(method: Method) -> Method:
        @functools.wraps(method)
        def counting(self, *args, **kwargs):
            try:
                result = method(self, *args, **kwargs)
            except StoreError:
                record(self.kind, operation, ERROR)
                raise
            record(self.kind, operation, OK)
            return result

        return counting  # type: ignore[return-value]

    return wrap
