"""Request limits: the body size, enforced before a body is buffered, and the JSON depth.

Starlette has no default body limit (a huge JSON body is an out-of-memory), so this ASGI
middleware answers 413 from the Content-Length header alone, and counts the bytes of chunked
bodies as they arrive. A chunked body to the v3 records route is a stream of records and is
bounded per record instead (api/http/json_stream.py).
"""

from __future__ import annotations

import re

import orjson

from api.http.errors import error_body

# Deepest nesting of arrays/objects in a request JSON document (a produce body counts its own
# envelope: `{"records": [{"value": ...}]}` is depth 3 before the value). Beyond it a document is
# refused with 422 42213 before any record is encoded: orjson refuses to encode past 254 levels
# (a 500 before this limit) and to decode past 1024. A fixed limit, as Kafka's protocol has
# fixed sizes: no legitimate record nests this deep.
JSON_DEPTH_MAX = 32
JSON_DEPTH_CODE = 42213

_STREAMING_ROUTE = re.compile(r"^/v3/clusters/[^/]+/topics/[^/]+/records$")


class BodyTooLarge(Exception):
    pass


class BodyLimitMiddleware:
    def __init__(self, app, *, bytes_max: int) -> None:
        self.app = app
        self.bytes_max = bytes_max

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = _content_length(scope)
        if declared is not None and declared > self.bytes_max:
            return await self._reject(send)
        if declared is None and _STREAMING_ROUTE.match(scope["path"]):
            return await self.app(scope, receive, send)
        await self._call_counting(scope, receive, send)

    async def _call_counting(self, scope, receive, send) -> None:
        """Count body bytes as they arrive. Once over the limit, whatever the app answers (a
        route that parses a body turns the read error into a 400) is replaced by the 413."""
        received, exceeded, started = 0, False, False

        async def limited_receive():
            nonlocal received, exceeded
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.bytes_max:
                    exceeded = True
                    raise BodyTooLarge
            return message

        async def guarded_send(message):
            nonlocal started
            if exceeded:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except BodyTooLarge:
            pass
        if exceeded and not started:
            await self._reject(send)

    async def _reject(self, send) -> None:
        body = orjson.dumps(
            error_body(
                413,
                f"The request body is larger than the gateway's limit of {self.bytes_max} bytes "
                f"(LAKELOG_REQUEST_BYTES_MAX); send fewer records per request.",
            )
        )
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def json_depth_exceeds(document: object, depth_max: int) -> bool:
    """Whether `document` nests arrays/objects deeper than `depth_max` (a scalar is depth 0,
    `[]` depth 1). Iterative, and visits containers only."""
    if not isinstance(document, dict | list):
        return False
    if depth_max < 1:
        return True
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value
        for child in children:
            if isinstance(child, dict | list):
                if depth >= depth_max:
                    return True
                stack.append((child, depth + 1))
    return False


def json_depth_message(depth_max: int) -> str:
    return (
        f"The JSON document nests arrays/objects more than {depth_max} levels deep; the limit "
        f"is {depth_max}: flatten the document."
    )
