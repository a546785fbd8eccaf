"""SASL SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), as Kafka offers them: credentials
made from a password (lakelog's CLI) or from the salted password Kafka's AdminClient sends
(AlterUserScramCredentials), and the server side of the exchange (scramp).

Kafka's rules: 4096..16384 iterations; a user name travels as a SCRAM saslname (`=2C` for a
comma, `=3D` for `=`) and names the principal `User:<name>`."""

from __future__ import annotations

import hashlib
import hmac
import secrets

import scramp

from api.security.errors import (
    AuthenticationFailed,
    UnacceptableCredential,
    UnsupportedSaslMechanism,
)
from storage_layout.meta.principals import USER_PREFIX, ScramCredential

SCRAM_SHA_256, SCRAM_SHA_512 = "SCRAM-SHA-256", "SCRAM-SHA-512"
HASHES = {SCRAM_SHA_256: hashlib.sha256, SCRAM_SHA_512: hashlib.sha512}
MECHANISM_IDS = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}  # Kafka's ScramMechanism type ids
ITERATIONS_MIN, ITERATIONS_MAX = 4096, 16384
DEFAULT_ITERATIONS = 8192
SALT_BYTES = 32


def check_mechanism(mechanism: str) -> None:
    if mechanism not in HASHES:
        raise UnsupportedSaslMechanism(
            f"Unknown SCRAM mechanism '{mechanism}': {SCRAM_SHA_256} or {SCRAM_SHA_512}."
        )


def credential_from_salted(
    principal: str, mechanism: str, iterations: int, salt: bytes, salted_password: bytes
) -> ScramCredential:
    """What the server keeps of a salted password (RFC 5802: StoredKey and ServerKey).

    Raises:
        UnsupportedSaslMechanism, UnacceptableCredential: Kafka's rules.
    """
    check_mechanism(mechanism)
    if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
        raise UnacceptableCredential(
            f"Iterations must be {ITERATIONS_MIN}..{ITERATIONS_MAX} (got {iterations})."
        )
    if principal == USER_PREFIX or not salt or not salted_password:
        raise UnacceptableCredential("A SCRAM credential needs a user name, a salt and a password.")
    digest = HASHES[mechanism]
    client_key = hmac.digest(salted_password, b"Client Key", digest)
    stored_key = digest(client_key).digest()
    server_key = hmac.digest(salted_password, b"Server Key", digest)
    return ScramCredential(principal, mechanism, iterations, salt, stored_key, server_key)


def credential_from_password(
    principal: str, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS
) -> ScramCredential:
    """A new credential (a fresh random salt) for `password`."""
    check_mechanism(mechanism)
    salt = secrets.token_bytes(SALT_BYTES)
    salted = hashlib.pbkdf2_hmac(HASHES[mechanism]().name, password.encode(), salt, iterations)
    return credential_from_salted(principal, mechanism, iterations, salt, salted)


def principal_of(sasl_name: str) -> str:
    return USER_PREFIX + sasl_name.replace("=2C", ",").replace("=3D", "=")


def principal_in(client_first: bytes) -> str:
    """The principal a client-first message names (`n,,n=<saslname>,r=<nonce>...`).

    Raises:
        AuthenticationFailed: not a client-first message.
    """
    try:
        attributes = client_first.decode().split(",")
    except UnicodeDecodeError:
        raise AuthenticationFailed() from None
    names = [a[2:] for a in attributes[2:] if a.startswith("n=")]
    if len(attributes) < 4 or len(names) != 1 or not names[0]:
        raise AuthenticationFailed()
    return principal_of(names[0])


class ScramExchange:
    """The server side of one SCRAM authentication of `credential`'s principal: client-first
    in, server-first out, then client-final in, server-final out."""

    def __init__(self, credential: ScramCredential) -> None:
        self.principal = credential.principal
        self._credential = credential
        self._server = scramp.ScramMechanism(credential.mechanism).make_server(self._auth_info)

    def _auth_info(self, sasl_name: str):
        if principal_of(sasl_name) != self.principal:
            return None
        credential = self._credential
        return (credential.salt, credential.stored_key, credential.server_key,
                credential.iterations)  # fmt: skip

    def first(self, client_first: bytes) -> bytes:
        """The server-first message.

        Raises:
            AuthenticationFailed: a malformed message.
        """
        try:
            self._server.set_client_first(client_first.decode())
            return self._server.get_server_first().encode()
        except (scramp.ScramException, UnicodeDecodeError, ValueError):
            raise AuthenticationFailed() from None

    def final(self, client_final: bytes) -> bytes:
        """The server-final message once the client's proof checks.

        Raises:
            AuthenticationFailed: a wrong proof (wrong password) or a malformed message.
        """
        try:
            self._server.set_client_final(client_final.decode())
            return self._server.get_server_final().encode()
        except (scramp.ScramException, UnicodeDecodeError, ValueError):
            raise AuthenticationFailed() from None
