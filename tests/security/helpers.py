"""Shared by the security tests: principals and keys made on the store, keyed clients."""

from __future__ import annotations

import base64
import time

import httpx

from storage_layout.meta.principals import PrincipalStore

SECRET = "test-cluster-secret-0123456789"
AUTH_ENV = {
    "LAKELOG_AUTH": "api-keys",
    "LAKELOG_AUTHORIZER": "acl",
    "LAKELOG_SUPER_USERS": "User:admin",
    "LAKELOG_CLUSTER_SECRET": SECRET,
    "LAKELOG_AUTH_CACHE_MS": "300",
    "LAKELOG_SECURITY_REFRESH_MS": "200",
}
V3 = "/v3/clusters/lakelog"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
PROPAGATION_S = 0.8  # > auth_cache_ms and security_refresh_ms above


def make_keys(data_dir, *names: str, expires_in_s: float | None = None) -> dict[str, str]:
    """`<key_id>.<secret>` for each principal (created if needed), straight on the store."""
    store = PrincipalStore(str(data_dir))
    tokens = {}
    for name in names:
        store.add_principal(name)
        expires_at_ms = None if expires_in_s is None else int((time.time() + expires_in_s) * 1000)
        key_id, secret = store.create_key(name, expires_at_ms=expires_at_ms)
        tokens[name] = f"{key_id}.{secret}"
    return tokens


def bearer(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def basic(url: str, token: str) -> httpx.Client:
    key_id, secret = token.split(".", 1)
    return httpx.Client(base_url=url, auth=(key_id, secret), timeout=30)


def add_acl(admin: httpx.Client, principal: str, operation: str, name: str, **extra) -> None:
    body = {
        "principal": principal,
        "operation": operation,
        "resource_type": extra.get("resource_type", "TOPIC"),
        "resource_name": name,
        "pattern_type": extra.get("pattern_type", "LITERAL"),
        "permission": extra.get("permission", "ALLOW"),
    }
    response = admin.post(f"{V3}/acls", json=body)
    assert response.status_code == 201, response.text


def create_topic(admin: httpx.Client, name: str, partitions: int = 1) -> None:
    body = {"topic_name": name, "partitions_count": partitions}
    response = admin.post(f"{V3}/topics", json=body)
    assert response.status_code == 201, response.text


def produce(client: httpx.Client, topic: str, values: list[bytes], **fields) -> httpx.Response:
    records = [{"value": base64.b64encode(v).decode()} for v in values]
    return client.post(
        f"/topics/{topic}", json={"records": records, **fields}, headers={"Content-Type": BINARY_V2}
    )


def assert_error(response: httpx.Response, status: int, code: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error_code"] == code, body
    return body
