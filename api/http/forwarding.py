"""Serving a read that the partition's leader must answer: proxy the request to it."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

import httpx
from fastapi import Request
from starlette.responses import Response

from api.core.broker import Broker
from api.core.errors import NotLeader
from api.core.groups.errors import NotCoordinator

_PASSED_HEADERS = ("accept", "content-type")
# Which node read the records of a fetch answer (the leader, or a follower from the table).
SERVED_BY_HEADER = "x-lakelog-served-by"
NEXT_OFFSET_HEADER = "x-lakelog-next-offset"  # where a fetch goes on (FetchResult.next_offset)


async def proxy_to_leader(request: Request, broker: Broker, leader_url: str) -> Response:
    """Send the same GET to the leader and return its answer unchanged. Through `broker.http`:
    its connections are reused, and with security on it signs node-to-node requests."""
    headers = {k: v for k, v in request.headers.items() if k.lower() in _PASSED_HEADERS}
    url = leader_url + request.url.path
    try:
        answer = await broker.http.get(url, params=request.query_params, headers=headers)
    except httpx.HTTPError as error:
        raise NotLeader(
            f"The partition's leader at {leader_url} is unreachable ({type(error).__name__}); "
            f"retry shortly."
        ) from None
    media_type = answer.headers.get("content-type")
    kept = (SERVED_BY_HEADER, NEXT_OFFSET_HEADER)
    headers = {k: v for k, v in answer.headers.items() if k.lower() in kept}
    return Response(answer.content, answer.status_code, media_type=media_type, headers=headers)


async def forward_request(request: Request, broker: Broker, node_url: str) -> Response:
    """Send the same request (method, path, query, body) to another node and return its
    answer unchanged: how any node serves a consumer group coordinated elsewhere."""
    headers = {k: v for k, v in request.headers.items() if k.lower() in _PASSED_HEADERS}
    try:
        answer = await broker.http.request(
            request.method,
            node_url + request.url.path,
            params=request.query_params,
            headers=headers,
            content=await request.body(),
        )
    except httpx.HTTPError as error:
        raise NotCoordinator(
            f"The group's coordinator at {node_url} is unreachable ({type(error).__name__}); "
            f"retry shortly."
        ) from None
    media_type = answer.headers.get("content-type")
    return Response(answer.content, answer.status_code, media_type=media_type)


def served_by_coordinator(endpoint: Callable[..., Awaitable]) -> Callable[..., Awaitable]:
    """Run a group route on the group's coordinator node: on any other node the request is
    forwarded there unchanged. The endpoint takes `group`, `request` and `broker` arguments."""

    @functools.wraps(endpoint)
    async def serve(**kwargs):
        broker, request = kwargs["broker"], kwargs["request"]
        url = broker.groups.remote_url(kwargs["group"])
        if url is not None:
            return await forward_request(request, broker, url)
        return await endpoint(**kwargs)

    return serve
