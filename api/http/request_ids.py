"""Every HTTP request gets an id (`x-request-id`: the client's, or a new one), answered back in
the same header, set for the logs and carried by the requests this node forwards."""

from __future__ import annotations

from api.core.request_context import REQUEST_ID_HEADER, begin_request

_HEADER = REQUEST_ID_HEADER.encode()


class RequestIdMiddleware:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope.get("headers", ()) if k == _HEADER), None)
        request_id = begin_request(given.decode("latin-1") if given is not None else None)

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", ()) if k != _HEADER]
                message = {**message, "headers": [*headers, (_HEADER, request_id.encode())]}
            await send(message)

        await self.app(scope, receive, send_with_id)
