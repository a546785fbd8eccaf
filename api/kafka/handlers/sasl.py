"""SASL over the Kafka protocol (KIP-152: SaslHandshake v1, then SaslAuthenticate frames), and
the SCRAM credentials' admin APIs (DescribeUserScramCredentials, AlterUserScramCredentials:
`kafka-configs --entity-type users --alter --add-config 'SCRAM-SHA-256=[password=...]'`).

- PLAIN with lakelog's API keys: username = key id, password = secret, checked as the HTTP API
  checks a key (the same store, cache and revocation).
- SCRAM-SHA-256 and SCRAM-SHA-512 with the credentials stored salted in `_meta/principals`
  (api/security/scram.py): two SaslAuthenticate round trips; the user `alice` is the principal
  `User:alice`.
- OAUTHBEARER (with LAKELOG_OAUTH_JWKS): a JWT checked against the JWKS, issuer, audience and
  expiry (api/security/oauth.py); its subject names the principal `User:<sub>`.

A failed authentication is answered, then the connection is closed, as Kafka does."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from api.kafka.connection import Connection
from api.kafka.errors import error_code, error_message
from api.security import oauth, scram
from api.security.authorizer import CLUSTER_RESOURCE_NAME
from api.security.errors import AuthenticationFailed
from storage_layout.meta.principals import USER_PREFIX

PLAIN, OAUTHBEARER = "PLAIN", "OAUTHBEARER"
MECHANISMS = (PLAIN, scram.SCRAM_SHA_256, scram.SCRAM_SHA_512)
MECHANISM_NAMES = {number: name for name, number in scram.MECHANISM_IDS.items()}


def mechanisms(connection: Connection) -> list[str]:
    """What this listener offers: OAUTHBEARER too when a JWKS is configured."""
    oauth = [OAUTHBEARER] if connection.security.oauth is not None else []
    return [*MECHANISMS, *oauth]


async def sasl_handshake(connection: Connection, request, version: int) -> dict:
    if not connection.security.auth_enabled:
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}
    offered = mechanisms(connection)
    if request.mechanism not in offered:
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": offered}
    connection.sasl_mechanism = request.mechanism
    return {"error_code": ErrorCode.none, "mechanisms": offered}


async def sasl_authenticate(connection: Connection, request, version: int) -> dict:
    if connection.sasl_mechanism not in mechanisms(connection) or connection.authenticated:
        connection.close_after_answer = True
        return _failed(ErrorCode.illegal_sasl_state, "Send SaslHandshake first, once.")
    try:
        if connection.sasl_mechanism == PLAIN:
            key_id, secret = _plain(request.auth_bytes)
            connection.principal = await connection.security.authenticate(key_id, secret)
            return _authenticated(connection, b"")
        if connection.sasl_mechanism == OAUTHBEARER:
            token = oauth.bearer_token(request.auth_bytes)
            connection.principal = await connection.security.authenticate_token(token)
            return _authenticated(connection, b"")
        return await _scram_step(connection, request.auth_bytes)
    except AuthenticationFailed as error:
        connection.close_after_answer = True
        return _failed(ErrorCode.sasl_authentication_failed, error_message(error))


async def _scram_step(connection: Connection, message: bytes) -> dict:
    """The first SCRAM round trip answers server-first; the second checks the client's
    proof and answers server-final."""
    exchange = connection.sasl_exchange
    if exchange is None:
        principal = scram.principal_in(message)
        mechanism = connection.sasl_mechanism
        credential = await connection.security.scram_credential(principal, mechanism)
        if credential is None:
            raise AuthenticationFailed()
        connection.sasl_exchange = scram.ScramExchange(credential)
        return _answer(connection.sasl_exchange.first(message))
    server_final = exchange.final(message)
    connection.principal = exchange.principal
    connection.sasl_exchange = None
    return _authenticated(connection, server_final)


def _authenticated(connection: Connection, auth_bytes: bytes) -> dict:
    connection.authenticated = True
    return _answer(auth_bytes)


def _answer(auth_bytes: bytes) -> dict:
    return {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": auth_bytes,
            "session_lifetime": 0}  # fmt: skip


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


# ---- SCRAM credentials -------------------------------------------------------------------


async def describe_user_scram_credentials(connection: Connection, request, version: int) -> dict:
    answer = {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None}
    if not connection.permits("DESCRIBE", "cluster", CLUSTER_RESOURCE_NAME):
        return answer | {"error_code": ErrorCode.cluster_authorization_failed, "results": []}
    known: dict[str, list] = {}
    for credential in connection.security.scram_credentials():
        user = credential.principal.removeprefix(USER_PREFIX)
        info = {"mechanism": scram.MECHANISM_IDS[credential.mechanism],
                "iterations": credential.iterations}  # fmt: skip
        known.setdefault(user, []).append(info)
    wanted = [user.name for user in request.users] if request.users else sorted(known)
    results = [_described(user, known, wanted) for user in dict.fromkeys(wanted)]
    return answer | {"results": results}


def _described(user: str, known: dict[str, list], wanted: list[str]) -> dict:
    result = {"user": user, "error_code": ErrorCode.none, "error_message": None}
    if wanted.count(user) > 1:
        message = f"Cannot describe SCRAM credentials for the same user twice: {user}"
        return result | {"error_code": ErrorCode.duplicate_resource, "error_message": message}
    if user not in known:
        message = f"Attempt to describe nonexistent SCRAM credential for user {user}"
        return result | {"error_code": ErrorCode.resource_not_found, "error_message": message}
    return result | {"credential_infos": known[user]}


async def alter_user_scram_credentials(connection: Connection, request, version: int) -> dict:
    allowed = connection.permits("ALTER", "cluster", CLUSTER_RESOURCE_NAME)
    users = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    results = {}
    for deletion in request.deletions:
        results.setdefault(deletion.name, await _delete(connection, deletion, allowed, users))
    for upsertion in request.upsertions:
        results.setdefault(upsertion.name, await _upsert(connection, upsertion, allowed, users))
    return {"throttle_time": 0, "results": list(results.values())}


async def _delete(connection: Connection, deletion, allowed: bool, users: list[str]) -> dict:
    async def remove() -> None:
        mechanism = MECHANISM_NAMES.get(deletion.mechanism, "")
        scram.check_mechanism(mechanism)
        principal = USER_PREFIX + deletion.name
        await connection.security.remove_scram_credential(principal, mechanism)

    return await _altered(deletion.name, allowed, users, remove)


async def _upsert(connection: Connection, upsertion, allowed: bool, users: list[str]) -> dict:
    async def store() -> None:
        credential = scram.credential_from_salted(
            USER_PREFIX + upsertion.name,
            MECHANISM_NAMES.get(upsertion.mechanism, ""),
            upsertion.iterations,
            upsertion.salt,
            upsertion.salted_password,
        )
        await connection.security.set_scram_credential(credential)

    return await _altered(upsertion.name, allowed, users, store)


async def _altered(user: str, allowed: bool, users: list[str], change) -> dict:
    result = {"user": user, "error_code": ErrorCode.none, "error_message": None}
    if not allowed:
        return result | {"error_code": ErrorCode.cluster_authorization_failed}
    if users.count(user) > 1:
        message = "A user credential cannot be altered twice in the same request"
        return result | {"error_code": ErrorCode.duplicate_resource, "error_message": message}
    try:
        await change()
    except Exception as error:
        return result | {"error_code": error_code(error), "error_message": error_message(error)}
    return result
