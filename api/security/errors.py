"""Security failures: one tree with stable codes, shared by every front-end. Each front-end maps
them to its wire: HTTP (api/http/errors.py) to 401 40101 with `WWW-Authenticate`, 403 40301 and
429 42901 with `Retry-After`; the Kafka protocol to its SASL and authorization error codes."""

from __future__ import annotations

import math


class SecurityError(Exception):
    code = "SECURITY_ERROR"


class AuthenticationFailed(SecurityError):
    """Missing or invalid credentials; the message never says which (or if the key exists)."""

    code = "SASL_AUTHENTICATION_FAILED"

    def __init__(self, message: str = "Authentication failed: missing or invalid credentials."):
        super().__init__(message)


class AuthorizationFailed(SecurityError):
    """The principal may not do this (no ACL allows it, or one denies it). `resource_type`
    ("topic", "group", "cluster", ...) lets a front-end pick its specific code."""

    code = "TOPIC_AUTHORIZATION_FAILED"  # the resource type decides: api/kafka/errors.py

    def __init__(self, message: str, *, resource_type: str | None = None) -> None:
        super().__init__(message)
        self.resource_type = resource_type


class QuotaExceeded(SecurityError):
    """The principal is over its byte rate on this node: retry after `retry_after_s` (whole
    seconds, at least 1)."""

    code = "THROTTLING_QUOTA_EXCEEDED"

    def __init__(self, kind: str, retry_after_s: float) -> None:
        self.retry_after_s = max(1, math.ceil(retry_after_s))
        super().__init__(
            f"The {kind} byte-rate quota is exceeded; retry after {self.retry_after_s} s."
        )


class SecurityDisabled(SecurityError):
    """A security setting was asked of a node that keeps none (no principal store)."""

    code = "SECURITY_DISABLED"


class UnacceptableCredential(SecurityError):
    """A SCRAM credential Kafka's rules refuse (iterations, an empty user name)."""

    code = "UNACCEPTABLE_CREDENTIAL"


class UnsupportedSaslMechanism(SecurityError):
    code = "UNSUPPORTED_SASL_MECHANISM"


class CredentialNotFound(SecurityError):
    """No SCRAM credential of that user and mechanism to delete."""

    code = "RESOURCE_NOT_FOUND"
