"""A loopback HTTP proxy in front of a store endpoint that injects the faults object stores are
known for: throttling (`503 SlowDown`) and lost answers (the request is applied, the client sees
an error). A rule picks the requests to hit; the store behind stays real."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased


@dataclass
class Faults:
    """What to do to matching requests: `throttle` answers 503 without forwarding; `lose`
    forwards (the store applies it) and then answers 503 as if the answer was lost. Each
    counts down per matching request; `hits` records what was done."""

    matches: Callable[[Request], bool]
    throttle: int = 0
    lose: int = 0
    hits: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def decide(self, request: Request) -> str:
        if not self.matches(request):
            return "pass"
        with self.lock:
            if self.throttle > 0:
                self.throttle -= 1
                self.hits.append(f"throttle {request.method} {request.path}")
                return "throttle"
            if self.lose > 0:
                self.lose -= 1
                self.hits.append(f"lose {request.method} {request.path}")
                return "lose"
        return "pass"


class FaultyProxy:
    """`start()`, point clients at `.endpoint`, set `.faults`, `stop()`."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.faults = Faults(matches=lambda request: False)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _any(self) -> None:
                proxy.handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any  # noqa: N815

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> FaultyProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        headers = dict(handler.headers.items())
        lowered = {k.lower(): v for k, v in headers.items()}
        action = self.faults.decide(Request(handler.command, handler.path, lowered))
        if action == "throttle":
            self._answer(handler, 503, SLOW_DOWN, {"Content-Type": "application/xml"})
            return
        status, reply_headers, reply = self._forward(handler.command, handler.path, headers, body)
        if action == "lose":
            self._answer(handler, 503, SLOW_DOWN, {"Content-Type": "application/xml"})
            return
        self._answer(handler, status, reply, reply_headers)

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes):
        connection = http.client.HTTPConnection(
            self.upstream.hostname, self.upstream.port, timeout=30
        )
        try:
            connection.request(method, path, body=body or None, headers=headers)
            response = connection.getresponse()
            reply = response.read()
            kept = {
                k: v
                for k, v in response.getheaders()
                if k.lower() not in ("transfer-encoding", "connection", "content-length")
            }
            return response.status, kept, reply
        finally:
            connection.close()

    @staticmethod
    def _answer(handler, status: int, body: bytes, headers: dict[str, str]) -> None:
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(body)
