"""Per-principal byte-rate quotas, enforced per node with a token bucket (Kafka's client quotas).

As in Kafka, a request is measured after the fact: bytes produced (request body) or fetched
(response body) are charged to the principal's bucket, which may go negative; while it is
negative the principal's next request of that kind is answered 429 with `Retry-After`, the time
the bucket needs to refill to zero. A bucket holds at most one second of its rate (the burst).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from api.security.errors import QuotaExceeded

PRODUCE, FETCH = "produce", "fetch"
BUCKETS_MAX = 100_000  # principals tracked per node; the least recently refilled are dropped


class TokenBucket:
    """Bytes allowed now; refills at `rate_bytes_per_s` up to one second's worth."""

    def __init__(self, rate_bytes_per_s: int, now_s: float) -> None:
        self.rate_bytes_per_s = rate_bytes_per_s
        self.tokens = float(rate_bytes_per_s)
        self.updated_s = now_s

    def refill(self, now_s: float) -> None:
        elapsed_s = max(0.0, now_s - self.updated_s)
        self.tokens = min(
            float(self.rate_bytes_per_s), self.tokens + elapsed_s * self.rate_bytes_per_s
        )
        self.updated_s = now_s

    def wait_s(self) -> float:
        """Seconds until the bucket is back to zero (0 if it is not in debt)."""
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate_bytes_per_s


class QuotaManager:
    """Token buckets per (principal, kind). `rate_of(principal, kind)` gives the byte rate
    (None = unlimited). Not thread-safe: used from the event loop only."""

    def __init__(self, rate_of: Callable[[str, str], int | None], clock=time.monotonic) -> None:
        self._rate_of = rate_of
        self._clock = clock
        self._buckets: dict[tuple[str, str], TokenBucket] = {}

    def check(self, principal: str, kind: str) -> None:
        """Raises QuotaExceeded while the principal's bucket of `kind` is in debt."""
        bucket = self._bucket(principal, kind)
        if bucket is not None and (wait_s := bucket.wait_s()) > 0:
            raise QuotaExceeded(kind, wait_s)

    def charge(self, principal: str, kind: str, size_bytes: int) -> None:
        bucket = self._bucket(principal, kind)
        if bucket is not None:
            bucket.tokens -= size_bytes

    def _bucket(self, principal: str, kind: str) -> TokenBucket | None:
        rate = self._rate_of(principal, kind)
        key = (principal, kind)
        if rate is None:
            self._buckets.pop(key, None)
            return None
        now_s = self._clock()
        bucket = self._buckets.get(key)
        if bucket is None or bucket.rate_bytes_per_s != rate:
            if len(self._buckets) >= BUCKETS_MAX:
                oldest = min(self._buckets, key=lambda k: self._buckets[k].updated_s)
                del self._buckets[oldest]
            bucket = self._buckets[key] = TokenBucket(rate, now_s)
        bucket.refill(now_s)
        return bucket
