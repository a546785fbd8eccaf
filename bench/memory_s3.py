"""A minimal in-memory S3 endpoint for the object-store bench's latency proxy (`--backend
memory`): the S3 calls lakelog and delta-rs make (PUT with `If-None-Match: *`, GET with ranges,
HEAD, DELETE, CopyObject, ListObjectsV2, DeleteObjects, CreateBucket), answered from a dict in
the proxy's own process.

Why: moto answers in 4-6 ms on an idle machine but ~15 ms while the gateway runs beside it on
two cores, so through moto the bench cannot show S3 Express-like latency (5 ms a request), and
its S3 Standard rows carry moto's time on top of the profile. With this backend a request costs
the proxy's own ~0.2 ms plus the drawn delay. Semantics that matter to lakelog are kept (a
conditional create of an existing key is refused with 412), authentication is not checked. The
tests use moto; this is only the bench's instrument.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from email.utils import formatdate
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

LIST_KEYS_MAX = 1000


@dataclass(frozen=True, slots=True)
class _Object:
    data: bytes
    etag: str
    modified_s: float


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    def encode(self, head_only: bool = False) -> bytes:
        reason = _REASONS.get(self.status, "OK")
        lines = [f"HTTP/1.1 {self.status} {reason}", *(f"{k}: {v}" for k, v in self.headers)]
        lines.append(f"Content-Length: {len(self.body)}")
        lines.append("Connection: keep-alive")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if head_only else head + self.body


_REASONS = {200: "OK", 204: "No Content", 206: "Partial Content", 404: "Not Found"}
_REASONS |= {412: "Precondition Failed", 416: "Range Not Satisfiable", 501: "Not Implemented"}


class MemoryS3:
    """Buckets of objects in memory. Single-threaded (the proxy's event loop)."""

    def __init__(self) -> None:
        self.buckets: dict[str, dict[str, _Object]] = {}

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Answer:
        parts = urlsplit(target)
        query = parse_qs(parts.query, keep_blank_values=True)
        bucket, _, key = unquote(parts.path).lstrip("/").partition("/")
        if not bucket:
            return Answer(200, (("Content-Type", "application/xml"),), b"<ListAllMyBucketsResult/>")
        if not key:
            return self._bucket_call(method, bucket, query, body)
        objects = self.buckets.get(bucket)
        if objects is None:
            return _error(404, "NoSuchBucket", bucket)
        if method == "PUT":
            return self._put(objects, key, headers, body)
        if method in ("GET", "HEAD"):
            return self._get(objects, key, headers)
        if method == "DELETE":
            objects.pop(key, None)
            return Answer(204)
        return _error(501, "NotImplemented", f"{method} {target}")

    def _bucket_call(self, method: str, bucket: str, query: dict, body: bytes) -> Answer:
        if method == "PUT":
            self.buckets.setdefault(bucket, {})
            return Answer(200)
        objects = self.buckets.get(bucket)
        if objects is None:
            return _error(404, "NoSuchBucket", bucket)
        if method == "POST" and "delete" in query:
            return self._delete_many(objects, body)
        if method == "GET" and query.get("list-type") == ["2"]:
            return self._list(bucket, objects, query)
        if method in ("GET", "HEAD"):
            return Answer(200)
        return _error(501, "NotImplemented", f"{method} /{bucket}")

    def _put(self, objects: dict[str, _Object], key: str, headers: dict, body: bytes) -> Answer:
        source = headers.get("x-amz-copy-source")
        if source is not None:
            src_bucket, _, src_key = unquote(source).lstrip("/").partition("/")
            found = self.buckets.get(src_bucket, {}).get(src_key)
            if found is None:
                return _error(404, "NoSuchKey", src_key)
            body = found.data
        if headers.get("if-none-match") == "*" and key in objects:
            return _error(412, "PreconditionFailed", key)
        stored = _Object(body, '"' + hashlib.md5(body).hexdigest() + '"', time.time())
        objects[key] = stored
        if source is not None:
            xml = (
                f"<CopyObjectResult><ETag>{escape(stored.etag)}</ETag>"
                f"<LastModified>{_iso(stored.modified_s)}</LastModified></CopyObjectResult>"
            )
            return Answer(200, (("Content-Type", "application/xml"),), xml.encode())
        return Answer(200, (("ETag", stored.etag),))

    def _get(self, objects: dict[str, _Object], key: str, headers: dict) -> Answer:
        found = objects.get(key)
        if found is None:
            return _error(404, "NoSuchKey", key)
        meta = (
            ("ETag", found.etag),
            ("Last-Modified", formatdate(found.modified_s, usegmt=True)),
            ("Accept-Ranges", "bytes"),
        )
        wanted = headers.get("range")
        if wanted is None:
            return Answer(200, meta, found.data)
        span = _byte_range(wanted, len(found.data))
        if span is None:
            return _error(416, "InvalidRange", wanted)
        first, last = span
        content_range = ("Content-Range", f"bytes {first}-{last}/{len(found.data)}")
        return Answer(206, (*meta, content_range), found.data[first : last + 1])

    def _delete_many(self, objects: dict[str, _Object], body: bytes) -> Answer:
        keys = [_unescape(k) for k in _between_all(body.decode(), "<Key>", "</Key>")]
        deleted = []
        for key in keys:
            objects.pop(key, None)
            deleted.append(f"<Deleted><Key>{escape(key)}</Key></Deleted>")
        xml = "<DeleteResult>" + "".join(deleted) + "</DeleteResult>"
        return Answer(200, (("Content-Type", "application/xml"),), xml.encode())

    def _list(self, bucket: str, objects: dict[str, _Object], query: dict) -> Answer:
        prefix = query.get("prefix", [""])[0]
        delimiter = query.get("delimiter", [""])[0]
        after = query.get("continuation-token", query.get("start-after", [""]))[0]
        keys_max = int(query.get("max-keys", [LIST_KEYS_MAX])[0])
        contents, prefixes, truncated, last = [], [], False, ""
        for key in sorted(k for k in objects if k.startswith(prefix) and k > after):
            rest = key[len(prefix) :]
            if delimiter and delimiter in rest:
                common = prefix + rest.split(delimiter, 1)[0] + delimiter
                if common not in prefixes and common > after:
                    if len(contents) + len(prefixes) >= keys_max:
                        truncated = True
                        break
                    prefixes.append(common)
                    last = common + "\uffff"
                continue
            if len(contents) + len(prefixes) >= keys_max:
                truncated = True
                break
            contents.append(key)
            last = key
        parts = [
            f"<ListBucketResult><Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>",
            f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount><MaxKeys>{keys_max}</MaxKeys>",
            f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>",
        ]
        if truncated:
            parts.append(f"<NextContinuationToken>{escape(last)}</NextContinuationToken>")
        for key in contents:
            found = objects[key]
            parts.append(
                f"<Contents><Key>{escape(key)}</Key><LastModified>{_iso(found.modified_s)}"
                f"</LastModified><ETag>{escape(found.etag)}</ETag><Size>{len(found.data)}</Size>"
                "<StorageClass>STANDARD</StorageClass></Contents>"
            )
        parts += [
            f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>" for p in prefixes
        ]
        parts.append("</ListBucketResult>")
        return Answer(200, (("Content-Type", "application/xml"),), "".join(parts).encode())


def _byte_range(header: str, size: int) -> tuple[int, int] | None:
    spec = header.removeprefix("bytes=")
    start, _, end = spec.partition("-")
    if not start:  # the last `end` bytes
        first, last = max(0, size - int(end)), size - 1
    else:
        first, last = int(start), (int(end) if end else size - 1)
    last = min(last, size - 1)
    return None if first > last else (first, last)


def _error(status: int, code: str, resource: str) -> Answer:
    xml = f"<Error><Code>{code}</Code><Message>{escape(resource)}</Message></Error>"
    return Answer(status, (("Content-Type", "application/xml"),), xml.encode())


def _iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + ".000Z"


def _between_all(text: str, start: str, end: str) -> list[str]:
    found, index = [], 0
    while (begin := text.find(start, index)) >= 0:
        stop = text.find(end, begin)
        found.append(text[begin + len(start) : stop])
        index = stop + len(end)
    return found


def _unescape(text: str) -> str:
    for entity, char in (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&apos;", "'")):
        text = text.replace(entity, char)
    return text.replace("&amp;", "&")
