"""Principals, API keys, quota overrides and producer-id owners: `_meta/principals`.

Why a Delta table and not a JSON file: the root may be an object store (s3://, abfss://) where a
"write then rename" is not atomic, and every gateway node and the CLI share the root. A Delta
commit is atomic on every root lakelog supports and gives the same compare-and-set the topic
catalog uses, so two writers of one key cannot both win.

Layout: a `documents.DocumentTable` (one row per version of a `(kind, name)` JSON document).

Kinds in `_meta/principals`:
- `principal` / `User:alice`: `{"created_at_ms"}`.
- `api_key` / `<key_id>`: `{"principal", "kdf": "scrypt", "n", "r", "p", "salt", "hash",
  "created_at_ms", "expires_at_ms"}`; salt and hash are base64. The secret itself is never
  stored: it is printed once by `lakelog api-keys create`.
- `quota` / `User:alice`: `{"produce_bytes_per_s", "fetch_bytes_per_s"}` (null = the default).
- `producer` / `<producer_id>`: `{"principal"}`, the principal a producer id is bound to.
- `scram` / `User:alice|SCRAM-SHA-256`: `{"iterations", "salt", "stored_key", "server_key"}`
  (base64): a SCRAM credential (RFC 5802). The password is never stored, nor the salted
  password: only what the server side of the exchange needs.

Concurrency contract: safe from several threads (a lock serializes this process's writers);
processes and nodes are serialized by the CAS.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

from storage_layout.errors import InvalidConfig
from storage_layout.meta.documents import DocumentTable

PRINCIPALS_TABLE = "principals"

USER_PREFIX = "User:"  # Kafka's principal type of a user: `alice` is `User:alice`
KIND_PRINCIPAL = "principal"
KIND_API_KEY = "api_key"
KIND_QUOTA = "quota"
KIND_PRODUCER = "producer"
KIND_SCRAM = "scram"
KIND_CLUSTER = "cluster"
CLUSTER_SECRET_NAME = "secret"
CLUSTER_SECRET_BYTES = 32

# scrypt with n=2^14, r=8: 16 MiB and ~40 ms per verification (cached by the gateway).
SCRYPT_N, SCRYPT_R, SCRYPT_P, HASH_BYTES, SALT_BYTES = 1 << 14, 8, 1, 32, 16
KEY_ID_BYTES, SECRET_BYTES = 8, 32
PRINCIPAL_PATTERN = re.compile(r"^User:[A-Za-z0-9._@\-]{1,200}$")
KEY_ID_PATTERN = re.compile(r"^[0-9a-f]{16}$")


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A stored API key: never its secret, only a salted scrypt hash of it."""

    key_id: str
    principal: str
    created_at_ms: int
    expires_at_ms: int | None
    document: dict

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms is not None and now_ms >= self.expires_at_ms

    def matches(self, secret: str) -> bool:
        """Constant-time comparison of the secret's hash with the stored one."""
        return hmac.compare_digest(
            hash_secret(secret, self.document), _unb64(self.document["hash"])
        )


@dataclass(frozen=True, slots=True)
class Quota:
    """Per-principal byte-rate overrides; None keeps the gateway's default."""

    produce_bytes_per_s: int | None = None
    fetch_bytes_per_s: int | None = None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """A principal's SCRAM credential for one mechanism (SCRAM-SHA-256 or SCRAM-SHA-512)."""

    principal: str
    mechanism: str
    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes


def normalize_principal(name: str) -> str:
    """`alice` or `User:alice` -> `User:alice` (InvalidConfig if not a valid name)."""
    principal = name if name.startswith(USER_PREFIX) else USER_PREFIX + name
    if not PRINCIPAL_PATTERN.match(principal):
        raise InvalidConfig(
            f"Invalid principal '{name}': use User:<name> with letters, digits, . _ @ -."
        )
    return principal


def hash_secret(secret: str, params: dict) -> bytes:
    """scrypt(secret) with the salt and cost parameters stored in `params`."""
    return hashlib.scrypt(
        secret.encode(),
        salt=_unb64(params["salt"]),
        n=params["n"],
        r=params["r"],
        p=params["p"],
        dklen=HASH_BYTES,
    )


def new_hash_params() -> dict:
    return {
        "kdf": "scrypt",
        "n": SCRYPT_N,
        "r": SCRYPT_R,
        "p": SCRYPT_P,
        "salt": _b64(secrets.token_bytes(SALT_BYTES)),
    }


class PrincipalStore:
    """Principals, their API keys, quota overrides and producer-id owners."""

    def __init__(self, root: str) -> None:
        self.table = DocumentTable(root, PRINCIPALS_TABLE)
        self.table.refresh()

    def refresh(self) -> bool:
        return self.table.refresh()

    # ---- principals ----

    def add_principal(self, name: str) -> str:
        principal = normalize_principal(name)
        self.table.put(KIND_PRINCIPAL, principal, {"created_at_ms": _now_ms()}, create_only=True)
        return principal

    def principals(self) -> list[str]:
        return sorted(self.table.documents(KIND_PRINCIPAL))

    def remove_principal(self, name: str) -> bool:
        """Delete a principal, its API keys and its quota overrides."""
        principal = normalize_principal(name)
        for key in self.api_keys(principal):
            self.revoke_key(key.key_id)
        self.table.put(KIND_QUOTA, principal, None)
        return self.table.put(KIND_PRINCIPAL, principal, None)

    # ---- the cluster secret ----

    def cluster_secret(self) -> bytes:
        """The secret nodes sign their requests to each other with, made on first use.

        Kept in the store so that turning authentication on is one setting: every node on the
        root reads the same value. Whoever can read the store can already read every topic and
        add an API key, so keeping it there gives nobody new power. The first node's write
        wins (create-only); a node that lost the race reads the winner's.
        """
        document = self.table.get(KIND_CLUSTER, CLUSTER_SECRET_NAME)
        if document is None:
            candidate = {"secret": _b64(secrets.token_bytes(CLUSTER_SECRET_BYTES))}
            self.table.put(KIND_CLUSTER, CLUSTER_SECRET_NAME, candidate, create_only=True)
            document = self.table.get(KIND_CLUSTER, CLUSTER_SECRET_NAME)
        return _unb64(document["secret"])

    # ---- API keys ----

    def create_key(self, principal: str, *, expires_at_ms: int | None = None) -> tuple[str, str]:
        """A new key of an existing principal: `(key_id, secret)`; only the hash is stored."""
        principal = normalize_principal(principal)
        if self.table.get(KIND_PRINCIPAL, principal) is None:
            raise InvalidConfig(f"Unknown principal '{principal}': add it first.")
        key_id, secret = secrets.token_hex(KEY_ID_BYTES), secrets.token_urlsafe(SECRET_BYTES)
        params = new_hash_params()
        document = {
            **params,
            "principal": principal,
            "hash": _b64(hash_secret(secret, params)),
            "created_at_ms": _now_ms(),
            "expires_at_ms": expires_at_ms,
        }
        self.table.put(KIND_API_KEY, key_id, document, create_only=True)
        return key_id, secret

    def api_key(self, key_id: str) -> ApiKey | None:
        document = self.table.get(KIND_API_KEY, key_id) if KEY_ID_PATTERN.match(key_id) else None
        return None if document is None else _api_key(key_id, document)

    def api_keys(self, principal: str | None = None) -> list[ApiKey]:
        keys = [_api_key(k, d) for k, d in self.table.documents(KIND_API_KEY).items()]
        return sorted(
            (k for k in keys if principal is None or k.principal == principal),
            key=lambda k: (k.principal, k.created_at_ms),
        )

    def revoke_key(self, key_id: str) -> bool:
        return self.table.put(KIND_API_KEY, key_id, None)

    # ---- quotas ----

    def set_quota(self, principal: str, quota: Quota) -> None:
        document = {
            "produce_bytes_per_s": quota.produce_bytes_per_s,
            "fetch_bytes_per_s": quota.fetch_bytes_per_s,
        }
        self.table.put(KIND_QUOTA, normalize_principal(principal), document)

    def remove_quota(self, principal: str) -> bool:
        return self.table.put(KIND_QUOTA, normalize_principal(principal), None)

    def quotas(self) -> dict[str, Quota]:
        return {name: Quota(**doc) for name, doc in self.table.documents(KIND_QUOTA).items()}

    # ---- SCRAM credentials ----

    def set_scram(self, credential: ScramCredential) -> None:
        """Store (or replace) the credential; its principal is added if it is new."""
        principal = normalize_principal(credential.principal)
        if self.table.get(KIND_PRINCIPAL, principal) is None:
            self.table.put(KIND_PRINCIPAL, principal, {"created_at_ms": _now_ms()})
        document = {
            "iterations": credential.iterations,
            "salt": _b64(credential.salt),
            "stored_key": _b64(credential.stored_key),
            "server_key": _b64(credential.server_key),
        }
        self.table.put(KIND_SCRAM, _scram_name(principal, credential.mechanism), document)

    def remove_scram(self, principal: str, mechanism: str) -> bool:
        name = _scram_name(normalize_principal(principal), mechanism)
        return self.table.put(KIND_SCRAM, name, None)

    def scram(self, principal: str, mechanism: str) -> ScramCredential | None:
        document = self.table.get(KIND_SCRAM, _scram_name(principal, mechanism))
        return None if document is None else _scram_credential(principal, mechanism, document)

    def scram_credentials(self) -> list[ScramCredential]:
        found = []
        for name, document in self.table.documents(KIND_SCRAM).items():
            principal, mechanism = name.split("|", 1)
            found.append(_scram_credential(principal, mechanism, document))
        return sorted(found, key=lambda c: (c.principal, c.mechanism))

    # ---- producer ids ----

    def bind_producer(self, producer_id: int, principal: str) -> None:
        if self.producer_owner(producer_id) != principal:
            self.table.put(KIND_PRODUCER, str(producer_id), {"principal": principal})

    def producer_owner(self, producer_id: int) -> str | None:
        document = self.table.get(KIND_PRODUCER, str(producer_id))
        return None if document is None else document["principal"]


def _api_key(key_id: str, document: dict) -> ApiKey:
    return ApiKey(
        key_id=key_id,
        principal=document["principal"],
        created_at_ms=document["created_at_ms"],
        expires_at_ms=document.get("expires_at_ms"),
        document=document,
    )


def _now_ms() -> int:
    return int(time.time() * 1000)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _scram_name(principal: str, mechanism: str) -> str:
    return f"{principal}|{mechanism}"  # "|" is in no principal name (PRINCIPAL_PATTERN)


def _scram_credential(principal: str, mechanism: str, document: dict) -> ScramCredential:
    return ScramCredential(
        principal,
        mechanism,
        document["iterations"],
        _unb64(document["salt"]),
        _unb64(document["stored_key"]),
        _unb64(document["server_key"]),
    )
