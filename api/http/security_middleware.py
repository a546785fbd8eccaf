"""Authentication, before anything else reads the request; byte accounting for quotas.

Credentials: `Authorization: Bearer <key_id>.<secret>` or HTTP Basic with `key_id:secret`, an
OAuth JWT as `Bearer <jwt>` (with LAKELOG_OAUTH_JWKS), or a node signature (`node_auth`). The
principal goes to `scope["lakelog.security"]` and to the `current_principal` context variable
(which signs it into node-to-node requests).
"""

from __future__ import annotations

import base64
import binascii

from api.http.access import SCOPE_KEY, RequestSecurity
from api.http.errors import ApiError, error_response
from api.security.errors import AuthenticationFailed, SecurityError
from api.security.node_auth import NODE_HEADER, current_principal, verify
from api.security.oauth import looks_like_jwt
from api.security.quotas import FETCH, PRODUCE
from api.security.state import ANONYMOUS, SecurityState
from storage_layout.cluster import routes

PUBLIC_PATHS = frozenset({"/"})  # the health check: service name, version, cluster id
CONSOLE_PREFIX = "/ui"  # the web console's static files (no data; its API calls need a key)
# A browser answers a Basic challenge with its own login dialog: the console asks for the key
# itself, so requests marked as its own are challenged for Bearer only.
CONSOLE_REQUEST = ("x-requested-with", "lakelog-console")
CONSOLE_CHALLENGE = 'Bearer realm="lakelog"'
CREDENTIALS_CHARS_MAX = 1024
JWT_CHARS_MAX = 16_384  # a signed token with its claims is longer than an API key


class SecurityMiddleware:
    """Pure ASGI (no extra task per request, bodies keep streaming)."""

    def __init__(self, app, *, security: SecurityState) -> None:
        self.app = app
        self.security = security

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.security.inspects_requests:
            return await self.app(scope, receive, send)  # security off: no cost per request
        try:
            principal, via_node = await self._authenticate(scope)
        except (ApiError, SecurityError) as error:
            response = error_response(error)
            if _from_console(scope) and "www-authenticate" in response.headers:
                response.headers["WWW-Authenticate"] = CONSOLE_CHALLENGE
            return await response(scope, receive, send)
        client = scope.get("client")
        context = RequestSecurity(principal, client[0] if client else "*", via_node)
        scope[SCOPE_KEY] = context
        token = current_principal.set(None if principal == ANONYMOUS else principal)
        try:
            await self.app(
                scope, self._counting_receive(receive, context), self._counting_send(send, context)
            )
        finally:
            current_principal.reset(token)

    async def _authenticate(self, scope) -> tuple[str, bool]:
        security = self.security
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        signed = headers.get(NODE_HEADER)
        if signed and security.cluster_secret is not None:
            principal = verify(
                security.cluster_secret, signed, method=scope["method"], path=scope["path"]
            )
            if principal is not None:
                return principal, True
        if not security.auth_enabled:
            return ANONYMOUS, False
        if scope["path"].startswith(routes.PREFIX):
            raise AuthenticationFailed("Node-to-node routes need a request signed by a node.")
        if _is_public(scope["path"]) and scope["method"] in ("GET", "HEAD"):
            return ANONYMOUS, False
        header = headers.get("authorization")
        token = bearer_jwt(header)
        if token is not None and security.oauth is not None:
            return await security.authenticate_token(token), False
        key_id, secret = parse_credentials(header)
        return await security.authenticate(key_id, secret), False

    def _counting_receive(self, receive, context: RequestSecurity):
        quotas, principal = self.security.quotas, context.principal

        async def counted():
            message = await receive()
            if message["type"] == "http.request":
                size = len(message.get("body", b""))
                if context.quota == PRODUCE:
                    quotas.charge(principal, PRODUCE, size)
                elif context.quota is None:
                    context.pending_bytes += size
            return message

        return counted

    def _counting_send(self, send, context: RequestSecurity):
        quotas, principal = self.security.quotas, context.principal

        async def counted(message):
            if message["type"] == "http.response.body" and context.quota == FETCH:
                quotas.charge(principal, FETCH, len(message.get("body", b"")))
            await send(message)

        return counted


def _is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path == CONSOLE_PREFIX or path.startswith(CONSOLE_PREFIX + "/")


def _from_console(scope) -> bool:
    name, value = (part.encode("latin-1") for part in CONSOLE_REQUEST)
    return any(k.lower() == name and v == value for k, v in scope["headers"])


def bearer_jwt(header: str | None) -> str | None:
    """The JWT of a `Bearer <jwt>` header (None: another scheme, or an API key's token)."""
    if not header or len(header) > JWT_CHARS_MAX:
        return None
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    return value if scheme.lower() == "bearer" and looks_like_jwt(value) else None


def parse_credentials(header: str | None) -> tuple[str, str]:
    """(key_id, secret) from a Bearer `<key_id>.<secret>` or Basic `key_id:secret` header.

    Raises:
        AuthenticationFailed: no header, another scheme, or a malformed value.
    """
    if not header or len(header) > CREDENTIALS_CHARS_MAX:
        raise AuthenticationFailed()
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        key_id, dot, secret = value.partition(".")
    elif scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise AuthenticationFailed() from None
        key_id, dot, secret = decoded.partition(":")
    else:
        raise AuthenticationFailed()
    if not key_id or not dot or not secret:
        raise AuthenticationFailed()
    return key_id, secret
