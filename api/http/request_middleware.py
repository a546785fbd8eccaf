"""What every HTTP request gets before any route runs, in one ASGI layer (one per request on
the produce and fetch paths, not two):

- an id (`x-request-id`: the client's, or a new one), answered back in the same header, set
  for the logs and carried by the requests this node forwards (api/core/request_context.py);
- its count and latency per route template (api/core/metrics.py), timed to the last byte of
  streamed answers (v3 produce reports, long polls).
"""

from __future__ import annotations

import time

from api.core import metrics
from api.core.request_context import REQUEST_ID_HEADER, begin_request

UNMATCHED = "unmatched"  # a path no route serves (404): one label value for all of them
# The client picks the method: any other is counted as OTHER, so the label stays bounded.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER = "OTHER"
_HEADER = REQUEST_ID_HEADER.encode()


class RequestMiddleware:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope.get("headers", ()) if k == _HEADER), None)
        request_id = begin_request(given.decode("latin-1") if given is not None else None)
        started = time.monotonic()
        status = 500  # if the app fails before it answers

        async def send_answer(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", ()) if k != _HEADER]
                message = {**message, "headers": [*headers, (_HEADER, request_id.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_answer)
        finally:
            route = getattr(scope.get("route"), "path", None) or UNMATCHED
            method = scope.get("method", "")
            metrics.record_http_request(
                route, method if method in METHODS else OTHER, status, time.monotonic() - started
            )
