"""Security failures, as Confluent error bodies with stable codes.

40101 authentication failed (401 with `WWW-Authenticate`), 40301 not authorized (403),
42901 quota exceeded (429 with `Retry-After` in seconds).
"""

from __future__ import annotations

import math

from api.errors import ApiError

AUTH_CHALLENGE = 'Bearer realm="lakelog", Basic realm="lakelog"'


class AuthenticationFailed(ApiError):
    """Missing or invalid credentials; the message never says which (or if the key exists)."""

    def __init__(self, message: str = "Authentication failed: missing or invalid credentials."):
        super().__init__(401, 40101, message, headers={"WWW-Authenticate": AUTH_CHALLENGE})


class AuthorizationFailed(ApiError):
    """The principal may not do this (no ACL allows it, or one denies it)."""

    def __init__(self, message: str) -> None:
        super().__init__(403, 40301, message)


class QuotaExceeded(ApiError):
    """The principal is over its byte rate on this node: retry after `retry_after_s`."""

    def __init__(self, kind: str, retry_after_s: float) -> None:
        seconds = max(1, math.ceil(retry_after_s))
        super().__init__(
            429,
            42901,
            f"The {kind} byte-rate quota is exceeded; retry after {seconds} s.",
            headers={"Retry-After": str(seconds)},
        )
