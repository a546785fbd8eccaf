"""uvicorn's httptools protocol with limits on the request head: its size, its header count and
the time a client may take to send it.

httptools buffers a request line and headers of any size (an 8 MB header was accepted and
answered 200) and uvicorn has no header timeout, so one client sending a byte a second holds a
connection forever (slow loris). Jetty, Tomcat and nginx bound both; so does this. The body has
its own limit (api/http/limits.py) and the app's routes their own timeouts.

A refused head is answered before the app sees the request: 414 (URL too long), 431 (headers too
large or too many) or 408 (head not received in time), with the gateway's JSON error body and
`connection: close`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from http import HTTPStatus

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from api.http.errors import error_body

logger = logging.getLogger("lakelog.http")
SWEEP_INTERVAL_S = 0.5  # head timeouts are enforced to within this


@dataclass(frozen=True)
class HeadLimits:
    """Bounds of one request head (request line + headers)."""

    bytes_max: int
    headers_max: int
    timeout_ms: int


@dataclass(frozen=True)
class _Refusal:
    status: HTTPStatus
    message: str


class HeadRefused(Exception):
    """Raised inside a parser callback to stop parsing; httptools re-raises it wrapped."""


def head_limited_protocol(limits: HeadLimits) -> type[HttpToolsProtocol]:
    """The protocol class to pass to uvicorn as `http=`: uvicorn instantiates it per connection
    with its own arguments, so the limits (and the connections the sweeper watches) travel as
    class attributes of a class made per server."""
    return type(
        "HeadLimitedProtocol",
        (HeadLimitedProtocol,),
        {"limits": limits, "_watched": set(), "_sweeping": False},
    )


class HeadLimitedProtocol(HttpToolsProtocol):
    """Per request this costs a clock read and a few attribute writes: the checks run once,
    when the head is complete (a Python override per header cost 7% of the cheapest
    request's throughput), and one sweeper per server enforces the head timeout instead of a
    timer per request."""

    limits: HeadLimits
    _watched: set[HeadLimitedProtocol]
    _sweeping: bool

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._awaiting_head = True
        self._head_started_s = 0.0
        self._head_bytes = 0
        self._message_completed = False
        self._refusal: _Refusal | None = None

    # -- connection -------------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        # From the connection on: one that never sends a byte is timed out too.
        self._head_started_s = self.loop.time()
        self._watched.add(self)
        cls = type(self)
        if not cls._sweeping and self.limits.timeout_ms > 0:
            cls._sweeping = True
            self.loop.call_later(SWEEP_INTERVAL_S, cls._sweep)

    def connection_lost(self, exc: Exception | None) -> None:
        self._watched.discard(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._message_completed = False
        super().data_received(data)
        self._count_head_bytes(len(data))

    def _count_head_bytes(self, size: int) -> None:
        """Count a chunk toward the head only if the parser still waits for the end of a head
        after it, so a head is refused as it arrives, not once complete. A chunk that
        completed a message may hold the start of the next (pipelining): it is not counted,
        so a large body is never mistaken for a large head; the next head gets at most one
        read buffer (256 KiB) for free, and its size is checked again when complete."""
        if not self._awaiting_head or self._message_completed or self.transport.is_closing():
            return
        self._head_bytes += size
        if self._head_bytes > self.limits.bytes_max:
            self._refuse(self._too_large())

    # -- parser callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._awaiting_head = True
        self._head_started_s = self.loop.time()

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.limits.bytes_max:
            self._refusal = _Refusal(
                HTTPStatus.REQUEST_URI_TOO_LONG,
                f"The request URL is longer than the gateway's limit of "
                f"{self.limits.bytes_max} bytes (LAKELOG_REQUEST_HEAD_BYTES_MAX).",
            )
            raise HeadRefused

    def on_headers_complete(self) -> None:
        """A head that arrived in one read is whole before _count_head_bytes sees it: check
        its size and header count here, before the app is started."""
        headers = self.headers
        if len(headers) > self.limits.headers_max:
            self._refusal = _Refusal(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"The request has more than {self.limits.headers_max} headers, the gateway's "
                f"limit (LAKELOG_REQUEST_HEADERS_MAX).",
            )
            raise HeadRefused
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in headers)
        if size > self.limits.bytes_max:
            self._refusal = self._too_large()
            raise HeadRefused
        self._awaiting_head = False
        self._head_bytes = 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._message_completed = True
        self._awaiting_head = True
        # The next head's time starts with its first byte (on_message_begin); until then the
        # connection is idle between requests, which uvicorn's keep-alive timeout bounds.
        self._head_started_s = float("inf")

    def send_400_response(self, msg: str) -> None:
        """uvicorn answers any parser error with a 400; a head refused by a callback above gets
        its own status instead."""
        if self._refusal is None:
            super().send_400_response(msg)
        else:
            self._send_refusal(self._refusal)

    # -- refusals ---------------------------------------------------------------------------

    def _too_large(self) -> _Refusal:
        return _Refusal(
            HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
            f"The request line and headers are larger than the gateway's limit of "
            f"{self.limits.bytes_max} bytes (LAKELOG_REQUEST_HEAD_BYTES_MAX).",
        )

    @classmethod
    def _sweep(cls) -> None:
        """Answer 408 to every connection whose head has taken longer than the timeout; runs
        every SWEEP_INTERVAL_S while the server has connections."""
        if not cls._watched:
            cls._sweeping = False  # the next connection starts it again
            return
        loop = next(iter(cls._watched)).loop
        deadline_s = loop.time() - cls.limits.timeout_ms / 1000
        for protocol in [p for p in cls._watched if p._head_started_s < deadline_s]:
            if protocol._awaiting_head and not protocol.transport.is_closing():
                protocol._refuse(
                    _Refusal(
                        HTTPStatus.REQUEST_TIMEOUT,
                        f"The request line and headers did not arrive within "
                        f"{cls.limits.timeout_ms} ms (LAKELOG_REQUEST_HEAD_TIMEOUT_MS).",
                    )
                )
        loop.call_later(SWEEP_INTERVAL_S, cls._sweep)

    def _refuse(self, refusal: _Refusal) -> None:
        self._refusal = refusal
        self._send_refusal(refusal)

    def _send_refusal(self, refusal: _Refusal) -> None:
        if self.transport.is_closing():
            return
        logger.warning("refused a request head from %s: %s", self.client, refusal.message)
        body = orjson.dumps(error_body(refusal.status.value, refusal.message))
        status = refusal.status
        lines = [f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode("ascii")]
        lines += [
            name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers
        ]
        lines += [
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
            b"connection: close\r\n\r\n",
            body,
        ]
        self.transport.write(b"".join(lines))
        self.transport.close()
