"""Splits a byte stream of concatenated JSON values (v3 streaming produce) into documents.

Boundaries are found by tracking brackets outside strings, so one malformed record becomes one
error report instead of poisoning the rest of the stream, and memory stays bounded by the
largest single record (`value_bytes_max`).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import orjson

from api.http.errors import ApiError
from api.http.limits import JSON_DEPTH_CODE, JSON_DEPTH_MAX, json_depth_message

_STRUCTURAL = re.compile(rb'[{}\[\]"]')
_IN_STRING = re.compile(rb'["\\]')
_WHITESPACE = b" \t\r\n"


class JsonValueSplitter:
    """Yields each top-level JSON value parsed, or an ApiError in its place."""

    def __init__(self, value_bytes_max: int, *, depth_max: int = JSON_DEPTH_MAX) -> None:
        self.value_bytes_max = value_bytes_max
        self.depth_max = depth_max

    async def split(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[object]:
        scanner = _Scanner(self.value_bytes_max, self.depth_max)
        async for chunk in chunks:
            scanner.feed(chunk)
            for value in scanner.values():
                yield value
                if isinstance(value, ApiError) and value.status == 413:
                    return
            if scanner.pending_bytes() > self.value_bytes_max:
                yield ApiError(
                    413,
                    413,
                    f"A record is larger than {self.value_bytes_max} bytes; the stream was closed.",
                )
                return
        if scanner.pending_bytes():
            yield ApiError(400, 400, "The stream ended inside a JSON record (incomplete JSON).")


class _Scanner:
    def __init__(self, value_bytes_max: int, depth_max: int = JSON_DEPTH_MAX) -> None:
        self.value_bytes_max = value_bytes_max
        self.depth_max = depth_max
        self.buffer = bytearray()
        self.start = 0  # where the current value starts
        self.position = 0  # how far scanning has got
        self.depth = 0
        self.depth_seen_max = 0  # deepest nesting of the current value so far
        self.in_string = False

    def feed(self, chunk: bytes) -> None:
        if self.start:
            del self.buffer[: self.start]
            self.position -= self.start
            self.start = 0
        self.buffer += chunk

    def pending_bytes(self) -> int:
        return len(self.buffer[self.start :].strip(_WHITESPACE))

    def values(self):
        while True:
            end = self._find_end()
            if end is None:
                return
            raw = bytes(self.buffer[self.start : end])
            self.start = self.position = end
            too_deep, self.depth_seen_max = self.depth_seen_max > self.depth_max, 0
            if len(raw) > self.value_bytes_max:
                yield ApiError(
                    413,
                    413,
                    f"A record is {len(raw)} bytes, more than the limit of "
                    f"{self.value_bytes_max} (LAKELOG_STREAM_RECORD_BYTES_MAX); the stream was "
                    f"closed.",
                )
                return
            if too_deep:  # one bad record, as a syntax error is: the stream goes on
                yield ApiError(422, JSON_DEPTH_CODE, json_depth_message(self.depth_max))
                continue
            yield _parse(raw)

    def _find_end(self) -> int | None:
        buffer = self.buffer
        if self.depth == 0 and not self.in_string:
            while self.start < len(buffer) and buffer[self.start] in _WHITESPACE:
                self.start += 1
            self.position = max(self.position, self.start)
            if self.start >= len(buffer):
                return None
            if buffer[self.start] not in b"{[":
                return self._scalar_end()
        while self.position < len(buffer):
            pattern = _IN_STRING if self.in_string else _STRUCTURAL
            match = pattern.search(buffer, self.position)
            if match is None:
                self.position = len(buffer)
                return None
            char = buffer[match.start()]
            self.position = match.start() + 1
            if self.in_string:
                if char == ord("\\"):
                    if self.position >= len(buffer):
                        self.position -= 1  # wait for the escaped character
                        return None
                    self.position += 1
                else:
                    self.in_string = False
            elif char == ord('"'):
                self.in_string = True
            elif char in b"{[":
                self.depth += 1
                self.depth_seen_max = max(self.depth_seen_max, self.depth)
            else:
                self.depth -= 1
                if self.depth == 0:
                    return self.position
        return None

    def _scalar_end(self) -> int | None:
        """End of a top-level scalar: a whole string, or a number/literal up to a delimiter."""
        if self.buffer[self.start] == ord('"'):
            return self._string_end(self.start + 1)
        for index in range(self.start, len(self.buffer)):
            if self.buffer[index] in _WHITESPACE or self.buffer[index] in b"{[":
                return index
        return None

    def _string_end(self, index: int) -> int | None:
        while (match := _IN_STRING.search(self.buffer, index)) is not None:
            if self.buffer[match.start()] == ord('"'):
                return match.start() + 1
            index = match.start() + 2  # skip the escaped character
        return None


def _parse(raw: bytes) -> object:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        return ApiError(400, 400, f"A record is not valid JSON: {error}.")
