"""The one client for node-to-node calls (routes.py), async for nodes and sync for Spark
executors: connection reuse, timeouts, and header hooks through which the node adds what every
call carries (the request id of the client request it acts for, the cluster signature).

Both clients raise NodeUnreachable when no answer came back; `call` returns any answer, and
`post_json`/`get_json` raise NodeRefused for an answer that is not a success.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import httpx
import orjson

from storage_layout.cluster.errors import NodeRefused, NodeUnreachable

# (method, path) -> headers every call adds, computed as it is sent.
HeaderHook = Callable[[str, str], Mapping[str, str]]
CONNECT_TIMEOUT_MS = 5_000
SUCCESS = 200


@dataclass(frozen=True, slots=True)
class NodeAnswer:
    """What the other node answered: status, body and headers (names in lower case)."""

    status: int
    content: bytes
    headers: Mapping[str, str]

    def json(self):
        return orjson.loads(self.content)

    @property
    def media_type(self) -> str | None:
        return self.headers.get("content-type")


class NodeClient:
    """Calls from a node to the others (async). Not thread-safe: one event loop uses it."""

    def __init__(self, *, timeout_ms: int, verify: ssl.SSLContext | bool = True) -> None:
        self._hooks: list[HeaderHook] = []
        self._http = httpx.AsyncClient(
            timeout=timeout_ms / 1000,
            verify=verify,
            event_hooks={"request": [self._add_headers]},
        )

    def add_header_hook(self, hook: HeaderHook) -> None:
        self._hooks.append(hook)

    async def call(
        self,
        method: str,
        url: str,
        path: str,
        *,
        timeout_ms: int | None = None,
        **request,
    ) -> NodeAnswer:
        """`method` on `url` + `path` (request: params, headers, json or content); the
        answer whatever its status.

        Raises:
            NodeUnreachable: no answer (connection refused or reset, timeout).
        """
        if timeout_ms is not None:
            request["timeout"] = timeout_ms / 1000
        try:
            response = await self._http.request(method, url + path, **request)
        except httpx.HTTPError as error:
            raise _unreachable(url, error) from None
        return _answer(response)

    async def post_json(self, url: str, path: str, body: dict, **options) -> dict:
        """POST `body`; the answer's JSON. Raises NodeUnreachable, or NodeRefused unless 200."""
        return _success(await self.call("POST", url, path, json=body, **options), url)

    async def get_json(self, url: str, path: str, **options) -> dict:
        return _success(await self.call("GET", url, path, **options), url)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _add_headers(self, request: httpx.Request) -> None:
        for hook in self._hooks:
            for name, value in hook(request.method, request.url.path).items():
                request.headers.setdefault(name, value)


class NodeSyncClient:
    """Calls to a node from a process that is not one (Spark executors handing appends to a
    partition's leader). Not thread-safe."""

    def __init__(self, *, timeout_ms: int, connect_timeout_ms: int = CONNECT_TIMEOUT_MS) -> None:
        timeout = httpx.Timeout(timeout_ms / 1000, connect=connect_timeout_ms / 1000)
        self._http = httpx.Client(timeout=timeout)

    def post_json(self, url: str, path: str, body: dict) -> dict:
        """POST `body`; the answer's JSON. Raises NodeUnreachable, or NodeRefused unless 200."""
        try:
            response = self._http.post(url + path, json=body)
        except httpx.HTTPError as error:
            raise _unreachable(url, error) from None
        return _success(_answer(response), url)

    def close(self) -> None:
        self._http.close()


def _answer(response: httpx.Response) -> NodeAnswer:
    return NodeAnswer(response.status_code, response.content, response.headers)


def _unreachable(url: str, error: httpx.HTTPError) -> NodeUnreachable:
    return NodeUnreachable(url=url, reason=type(error).__name__)


def _success(answer: NodeAnswer, url: str) -> dict:
    if answer.status == SUCCESS:
        return answer.json()
    try:
        refusal = answer.json()
    except orjson.JSONDecodeError:
        refusal = {}
    if not isinstance(refusal, dict):
        refusal = {}
    detail = refusal.get("message") or answer.content[:200].decode(errors="replace")
    raise NodeRefused(url=url, status=answer.status, refusal=refusal, detail=detail)
