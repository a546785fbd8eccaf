"""SASL over the Kafka protocol (KIP-152: SaslHandshake v1, then SaslAuthenticate frames).

PLAIN with lakelog's API keys: username = key id, password = secret, checked as the HTTP API
checks a key (the same store, cache and revocation). A failed authentication is answered, then
the connection is closed, as Kafka does. SCRAM is not offered: lakelog stores scrypt hashes of
its keys, which SCRAM's salted exchange cannot use."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from api.kafka.connection import Connection
from api.kafka.errors import error_message
from api.security.errors import AuthenticationFailed

PLAIN = "PLAIN"
MECHANISMS = (PLAIN,)


async def sasl_handshake(connection: Connection, request, version: int) -> dict:
    if not connection.security.auth_enabled:
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}
    if request.mechanism not in MECHANISMS:
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": list(MECHANISMS)}
    connection.sasl_mechanism = request.mechanism
    return {"error_code": ErrorCode.none, "mechanisms": list(MECHANISMS)}


async def sasl_authenticate(connection: Connection, request, version: int) -> dict:
    if connection.sasl_mechanism != PLAIN or connection.authenticated:
        connection.close_after_answer = True
        return _failed(ErrorCode.illegal_sasl_state, "Send SaslHandshake (PLAIN) first, once.")
    try:
        key_id, secret = _plain(request.auth_bytes)
        connection.principal = await connection.security.authenticate(key_id, secret)
    except AuthenticationFailed as error:
        connection.close_after_answer = True
        return _failed(ErrorCode.sasl_authentication_failed, error_message(error))
    connection.authenticated = True
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "auth_bytes": b"",
        "session_lifetime": 0,
    }


def _plain(token: bytes) -> tuple[str, str]:
    """RFC 4616: [authzid] NUL authcid NUL passwd."""
    parts = token.split(b"\x00")
    if len(parts) != 3 or not parts[1] or not parts[2]:
        raise AuthenticationFailed()
    try:
        return parts[1].decode(), parts[2].decode()
    except UnicodeDecodeError:
        raise AuthenticationFailed() from None


def _failed(code: ErrorCode, message: str) -> dict:
    return {"error_code": code, "error_message": message, "auth_bytes": b"", "session_lifetime": 0}
