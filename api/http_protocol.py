"""uvicorn's httptools protocol with limits on the request head: its size, its header count and
the time a client may take to send it.

httptools buffers a request line and headers of any size (an 8 MB header was accepted and
answered 200) and uvicorn has no header timeout, so one client sending a byte a second holds a
connection forever (slow loris). Jetty, Tomcat and nginx bound both; so does this. The body has
its own limit (api/limits.py) and the app's routes their own timeouts.

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

logger = logging.getLogger("lakelog.http")


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
    with its own arguments, so the limits travel as a class attribute."""
    return type("HeadLimitedProtocol", (HeadLimitedProtocol,), {"limits": limits})


class HeadLimitedProtocol(HttpToolsProtocol):
    limits: HeadLimits

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._awaiting_head = True
        self._head_bytes = 0
        self._header_count = 0
        self._parsed_head_bytes = 0
        self._message_completed = False
        self._refusal: _Refusal | None = None
        self._head_timer = None

    # -- connection -------------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        # A connection that never sends a byte would otherwise be held until the client leaves.
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._message_completed = False
        super().data_received(data)
        self._count_head_bytes(len(data))

    def _count_head_bytes(self, size: int) -> None:
        """Count a chunk toward the head only if the parser still waits for the end of a head
        after it. A chunk that completed a message may hold the start of the next (pipelining):
        it is not counted, so a large body is never mistaken for a large head; the next head
        gets at most one read buffer for free."""
        if not self._awaiting_head or self._message_completed or self.transport.is_closing():
            return
        self._head_bytes += size
        if self._head_bytes > self.limits.bytes_max:
            self._refuse(self._too_large())

    # -- parser callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._awaiting_head = True
        self._header_count = 0
        self._parsed_head_bytes = 0
        self._arm_head_timer()

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.limits.bytes_max:
            self._refusal = _Refusal(
                HTTPStatus.REQUEST_URI_TOO_LONG,
                f"The request URL is longer than the gateway's limit of "
                f"{self.limits.bytes_max} bytes (LAKELOG_REQUEST_HEAD_BYTES_MAX).",
            )
            raise HeadRefused

    def on_header(self, name: bytes, value: bytes) -> None:
        # A head that arrives in one read is parsed before _count_head_bytes sees it: count
        # the parsed fields too (": " and CRLF included).
        self._header_count += 1
        self._parsed_head_bytes += len(name) + len(value) + 4
        if self._parsed_head_bytes + len(self.url) > self.limits.bytes_max:
            self._refusal = self._too_large()
            raise HeadRefused
        if self._header_count > self.limits.headers_max:
            self._refusal = _Refusal(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"The request has more than {self.limits.headers_max} headers, the gateway's "
                f"limit (LAKELOG_REQUEST_HEADERS_MAX).",
            )
            raise HeadRefused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self._head_bytes = 0
        self._cancel_head_timer()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._message_completed = True
        self._awaiting_head = True

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

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._awaiting_head and not self.transport.is_closing():
            self._refuse(
                _Refusal(
                    HTTPStatus.REQUEST_TIMEOUT,
                    f"The request line and headers did not arrive within "
                    f"{self.limits.timeout_ms} ms (LAKELOG_REQUEST_HEAD_TIMEOUT_MS).",
                )
            )

    def _refuse(self, refusal: _Refusal) -> None:
        self._refusal = refusal
        self._send_refusal(refusal)

    def _send_refusal(self, refusal: _Refusal) -> None:
        self._cancel_head_timer()
        if self.transport.is_closing():
            return
        logger.warning("refused a request head from %s: %s", self.client, refusal.message)
        body = orjson.dumps({"error_code": refusal.status.value, "message": refusal.message})
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

    # -- head timer -------------------------------------------------------------------------

    def _arm_head_timer(self) -> None:
        if self._head_timer is None and self.limits.timeout_ms > 0:
            self._head_timer = self.loop.call_later(
                self.limits.timeout_ms / 1000, self._head_timed_out
            )

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
