"""Serving a request another node must answer: proxy it there (through the broker's peers:
connections reused, request ids carried, and node-to-node requests signed with security on)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from fastapi import Request
from starlette.responses import Response

from api.core.broker import Broker

_PASSED_HEADERS = ("accept", "content-type")
# Which node read the records of a fetch answer (the leader, or a follower from the table).
SERVED_BY_HEADER = "x-lakelog-served-by"
NEXT_OFFSET_HEADER = "x-lakelog-next-offset"  # where a fetch goes on (FetchResult.next_offset)


async def proxy_to_leader(request: Request, broker: Broker, leader_url: str) -> Response:
    """Send the same GET to the partition's leader and return its answer unchanged."""
    answer = await broker.peers.read_from_leader(
        leader_url, request.url.path, params=request.query_params, headers=_passed(request)
    )
    kept = (SERVED_BY_HEADER, NEXT_OFFSET_HEADER)
    headers = {k: v for k, v in answer.headers.items() if k.lower() in kept}
    return Response(answer.content, answer.status, media_type=answer.media_type, headers=headers)


async def forward_request(request: Request, broker: Broker, node_url: str) -> Response:
    """Send the same request (method, path, query, body) to the group's coordinator and return
    its answer unchanged: how any node serves a consumer group coordinated elsewhere."""
    answer = await broker.peers.forward_to_group_coordinator(
        node_url,
        request.method,
        request.url.path,
        params=request.query_params,
        headers=_passed(request),
        content=await request.body(),
    )
    return Response(answer.content, answer.status, media_type=answer.media_type)


def _passed(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.headers.items() if k.lower() in _PASSED_HEADERS}


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
