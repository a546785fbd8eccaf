"""Node-to-node requests: signed with the cluster secret, carrying the caller's principal.

Every request a node sends to another (`broker.peers`: forwarded appends, group routes forwarded
to the coordinator, reads proxied to a partition's leader, the group list) gets the header

    X-Lakelog-Node: <node_id>;<time_ms>;<principal or ->;<hex HMAC-SHA256>

over `method, path, time_ms, principal, node_id` with `LAKELOG_CLUSTER_SECRET`. The receiving node
accepts it for `NODE_CLOCK_SKEW_MS` and then trusts the principal named in it: the forwarding
node already authenticated and authorized the request. An identity header without a valid
signature is ignored (the request then needs its own credentials), and a client's API key is
never accepted on `/_lakelog/internal/...`.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import time
from collections.abc import Callable

NODE_HEADER = "x-lakelog-node"
NODE_CLOCK_SKEW_MS = 60_000
NODE_PRINCIPAL = "Node:lakelog"  # a node acting on its own behalf (no client request)

# The principal of the request being served; set by the security middleware.
current_principal: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "lakelog_principal", default=None
)


def sign(secret: bytes, *, method: str, path: str, principal: str | None, node_id: int) -> str:
    time_ms = int(time.time() * 1000)
    name = principal or "-"
    return f"{node_id};{time_ms};{name};{_mac(secret, method, path, time_ms, name, node_id)}"


def verify(secret: bytes, header: str, *, method: str, path: str) -> str | None:
    """The principal the signed header carries (NODE_PRINCIPAL if none), or None if invalid."""
    try:
        node_text, time_text, name, mac = header.split(";")
        node_id, time_ms = int(node_text), int(time_text)
    except ValueError:
        return None
    if abs(time.time() * 1000 - time_ms) > NODE_CLOCK_SKEW_MS:
        return None
    expected = _mac(secret, method, path, time_ms, name, node_id)
    if not hmac.compare_digest(expected.encode(), mac.encode()):
        return None
    return NODE_PRINCIPAL if name == "-" else name


def _mac(secret: bytes, method: str, path: str, time_ms: int, name: str, node_id: int) -> str:
    message = f"{method.upper()}\n{path}\n{time_ms}\n{name}\n{node_id}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def signature_hook(secret: bytes, node_id: int) -> Callable[[str, str], dict[str, str]]:
    """The header hook (storage_layout/cluster/client.py) that signs every request a node
    sends, for the principal of the request it acts for."""

    def signature(method: str, path: str) -> dict[str, str]:
        principal = current_principal.get()
        header = sign(secret, method=method, path=path, principal=principal, node_id=node_id)
        return {NODE_HEADER: header}

    return signature
