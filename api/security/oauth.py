"""OAuth 2 bearer tokens (JWTs) as credentials: SASL OAUTHBEARER on the Kafka listener
(RFC 7628, KIP-255) and `Authorization: Bearer <jwt>` over HTTP, checked the same way.

A token is accepted when its signature verifies against a key of the configured JWKS (a file,
or an http(s) URL fetched and cached by PyJWT; an unknown key id reads it again, at most every
`oauth_jwks_refresh_ms` for a URL, so keys can rotate), its algorithm is an asymmetric one, it
is unexpired, and it names the configured issuer and audience. Its principal claim (`sub` by
default) names the principal `User:<claim>`, to which ACLs apply as to any other."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import jwt

from api.security.errors import AuthenticationFailed
from storage_layout.meta.principals import USER_PREFIX

# Asymmetric algorithms only: a JWKS holds public keys, and an HMAC "verified" with a public
# key would accept a token anyone can sign.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
              "EdDSA")  # fmt: skip
BEARER_PREFIX = "auth=Bearer "
GS2_HEADER_END = ","
SEPARATOR = "\x01"


def looks_like_jwt(token: str) -> bool:
    """A compact JWS (three dot-separated parts) rather than an API key (`<id>.<secret>`)."""
    return token.count(".") == 2


class TokenValidator:
    """Checks JWTs against one JWKS and the configured claims. Thread-safe."""

    def __init__(
        self,
        jwks: str,
        *,
        issuer: str | None,
        audience: str | None,
        principal_claim: str,
        leeway_ms: int,
        refresh_ms: int,
    ) -> None:
        self._issuer = issuer
        self._audience = audience
        self._claim = principal_claim
        self._leeway_s = leeway_ms / 1000
        if jwks.startswith(("http://", "https://")):
            self._client: jwt.PyJWKClient | None = jwt.PyJWKClient(
                jwks, cache_keys=True, cooldown_duration=refresh_ms / 1000
            )
            self._file = None
        else:
            self._client, self._file = None, Path(jwks)
        self._keys: jwt.PyJWKSet | None = None
        self._lock = threading.Lock()

    def principal(self, token: str) -> str:
        """The principal a valid token names (blocking: may fetch the JWKS).

        Raises:
            AuthenticationFailed: a bad signature, an unknown key, a wrong issuer or audience,
                an expired token, or no principal claim (one message for all).
        """
        try:
            key = self._signing_key(token)
            claims = jwt.decode(
                token,
                key,
                algorithms=list(ALGORITHMS),
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._leeway_s,
                options={"require": ["exp"], "verify_aud": self._audience is not None},
            )
        except (jwt.PyJWTError, OSError, ValueError, KeyError):
            raise AuthenticationFailed() from None
        subject = claims.get(self._claim)
        if not isinstance(subject, str) or not subject:
            raise AuthenticationFailed()
        return USER_PREFIX + subject

    def _signing_key(self, token: str):
        if self._client is not None:
            return self._client.get_signing_key_from_jwt(token).key
        key_id = jwt.get_unverified_header(token).get("kid")
        for fresh in (False, True):  # a key id not yet seen: read the file again (rotation)
            keys = self._file_keys(fresh)
            matching = [k for k in keys.keys if key_id is None or k.key_id == key_id]
            if matching:
                return matching[0].key
        raise KeyError(key_id)

    def _file_keys(self, fresh: bool) -> jwt.PyJWKSet:
        with self._lock:
            if self._keys is None or fresh:
                self._keys = jwt.PyJWKSet.from_dict(json.loads(self._file.read_text()))
            return self._keys


def bearer_token(initial_response: bytes) -> str:
    """The token of an OAUTHBEARER client's initial response (RFC 7628 §3.1:
    `n,,` SEP `auth=Bearer <token>` SEP [key=value SEP ...] SEP).

    Raises:
        AuthenticationFailed: not such a message.
    """
    try:
        text = initial_response.decode()
    except UnicodeDecodeError:
        raise AuthenticationFailed() from None
    header, _, rest = text.partition(SEPARATOR)
    if not header.endswith(GS2_HEADER_END) or not rest.endswith(SEPARATOR * 2):
        raise AuthenticationFailed()
    for pair in rest.split(SEPARATOR):
        if pair.startswith(BEARER_PREFIX) and pair[len(BEARER_PREFIX) :].strip():
            return pair[len(BEARER_PREFIX) :].strip()
    raise AuthenticationFailed()
