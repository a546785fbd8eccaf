"""Kafka's wire protocol by hand for tests: one framed request, its answer read back with
Kafka's schema (kio), over a plain socket."""

from __future__ import annotations

import io
import socket
import struct

from kio.index import load_request_schema
from kio.serial import entity_reader, entity_writer

from api.kafka.messages import build, response_class


def connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def request_frame(api_key: int, version: int, body: dict, correlation_id: int = 7) -> bytes:
    schema = load_request_schema(api_key, version)
    header = schema.__header_schema__(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id="hostile",
    )
    buffer = io.BytesIO()
    entity_writer(schema.__header_schema__)(buffer, header)
    entity_writer(schema)(buffer, build(schema, body))
    payload = buffer.getvalue()
    return struct.pack(">i", len(payload)) + payload


def read_answer(sock: socket.socket) -> bytes | None:
    """The response payload (after the size), or None when the node closed the connection."""
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    return _read_exactly(sock, size)


def raw(address: str, api_key: int, version: int, body: dict):
    """One request over Kafka's protocol, its response read with Kafka's schema."""
    with connect(address) as sock:
        sock.sendall(request_frame(api_key, version, body))
        answer = read_answer(sock)
    schema = response_class(api_key, version)
    # the correlation id, then (flexible headers) an empty tagged-field count
    header_bytes = 5 if schema.__header_schema__.__flexible__ else 4
    response, _ = entity_reader(schema)(answer, header_bytes)
    return response


def _read_exactly(sock: socket.socket, count: int) -> bytes | None:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            return None
        data += chunk
    return data
