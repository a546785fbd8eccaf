"""Request counts and latencies per route template (api/core/metrics.py): an ASGI middleware,
so streamed answers (v3 produce reports, long polls) are timed to their last byte."""

from __future__ import annotations

import time

from api.core import metrics

UNMATCHED = "unmatched"  # a path no route serves (404): one label value for all of them


class MetricsMiddleware:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 500  # if the app fails before it answers

        async def send_and_note(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            route = getattr(scope.get("route"), "path", None) or UNMATCHED
            method = scope.get("method", "")
            metrics.HTTP_REQUESTS.labels(route, method, str(status)).inc()
            metrics.HTTP_REQUEST_SECONDS.labels(route, method).observe(time.monotonic() - started)
