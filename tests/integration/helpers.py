"""Helpers for the end-to-end tests: produce and fetch over HTTP, extra gateways with settings."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator

import httpx

from tests.conftest import BINARY_V2, JSON_V2, create_topic
from tests.gateway_process import GatewayProcess, start_gateway

__all__ = [
    "BINARY_V2",
    "assert_error",
    "JSON_V2",
    "V3",
    "b64",
    "create_topic",
    "fetch",
    "gateway_with",
    "produce",
    "unb64",
]

V3 = "/v3/clusters/lakelog"


def assert_error(response: httpx.Response, status: int, code: int) -> dict:
    """The response is Confluent's error body `{"error_code", "message"}` with this status."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error_code"] == code, body
    assert isinstance(body["message"], str) and body["message"], body
    return body


def b64(data: bytes | str | None) -> str | None:
    if data is None:
        return None
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def produce(
    client: httpx.Client,
    topic: str,
    records: list[dict],
    *,
    partition: int | None = None,
    content_type: str = BINARY_V2,
) -> httpx.Response:
    """POST a v2 produce body to the topic (or partition) URL."""
    path = f"/topics/{topic}" if partition is None else f"/topics/{topic}/partitions/{partition}"
    return client.post(path, json={"records": records}, headers={"Content-Type": content_type})


def fetch(
    client: httpx.Client,
    topic: str,
    partition: int = 0,
    offset: int = 0,
    *,
    accept: str = BINARY_V2,
    **params,
) -> httpx.Response:
    """GET records from `offset` (stateless fetch)."""
    return client.get(
        f"/topics/{topic}/partitions/{partition}/records",
        params={"offset": offset, **params},
        headers={"Accept": accept},
    )


@contextlib.contextmanager
def gateway_with(tmp_path_factory, name: str, env: dict[str, str]) -> Iterator[GatewayProcess]:
    """An extra gateway process with LAKELOG_* `env` overrides, stopped on exit."""
    process = start_gateway(tmp_path_factory.mktemp(name) / "data", env=env)
    try:
        yield process
    finally:
        process.stop()
