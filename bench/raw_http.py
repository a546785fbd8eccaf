"""A minimal asyncio HTTP/1.1 keep-alive client for load generation.

Why not httpx: on a 2-core machine that also runs the gateway, 48 httpx client threads spent
about as much CPU per request as the gateway did, so a latency bench at 1 000 requests/s
measured the client. This client does one thing: send prebuilt requests on one connection and
read `Content-Length` responses, on a single event loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class RawResponse:
    status: int
    body: bytes


class RawConnection:
    """One keep-alive connection; one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str):
        self._reader, self._writer, self._host = reader, writer, host

    @classmethod
    async def open(cls, url: str) -> RawConnection:
        parts = urlsplit(url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        return cls(reader, writer, f"{parts.hostname}:{parts.port}")

    async def request(
        self, method: str, target: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> RawResponse:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host}"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if body or method in ("POST", "PUT"):
            lines.append(f"Content-Length: {len(body)}")
        self._writer.write("\r\n".join(lines).encode() + b"\r\n\r\n" + body)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        length = 0
        for line in header_lines:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
            elif name.strip().lower() == "transfer-encoding":
                raise ValueError("chunked responses are not supported by this bench client")
        body_in = await self._reader.readexactly(length) if length else b""
        return RawResponse(int(status_line.split(" ", 2)[1]), body_in)

    async def close(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except ConnectionError:
            pass
