"""The gateway's security state: stores, verified-key cache, ACL snapshot, quotas, bindings.

Concurrency contract: used from the event loop; blocking store reads and writes run in threads
(`asyncio.to_thread`), one refresh at a time.

Revocation: a verified key is cached for `auth_cache_ms`; every `security_refresh_ms` the stores
are re-read and cached keys that are no longer stored are dropped, so a revoked key stops
working on every node within min(auth_cache_ms, security_refresh_ms) (5 s by default).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass

from api.security.authorizer import Authorizer
from api.security.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    CredentialNotFound,
    SecurityDisabled,
)
from api.security.oauth import TokenValidator
from api.security.quotas import FETCH, PRODUCE, QuotaManager
from conf.settings import Settings
from storage_layout.meta.acls import AclStore
from storage_layout.meta.principals import (
    ApiKey,
    PrincipalStore,
    Quota,
    ScramCredential,
    new_hash_params,
)

log = logging.getLogger("lakelog.security")

ANONYMOUS = "User:ANONYMOUS"  # Kafka's principal when authentication is off
VERIFY_CONCURRENCY_MAX = 4  # scrypt runs (16 MiB each) at once
INSTANCE_BINDINGS_MAX = 100_000


@dataclass(frozen=True, slots=True)
class _CachedKey:
    key_id: str
    principal: str
    until_s: float


class SecurityState:
    """Everything the middleware and the authorization dependency consult."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.auth_enabled = settings.auth != "none"
        self.acls_enabled = settings.authorizer == "acl"
        self.cluster_secret = (
            settings.cluster_secret.get_secret_value().encode() if settings.cluster_secret else None
        )
        self.uses_store = (
            self.auth_enabled
            or self.acls_enabled
            or settings.quota_produce_bytes_per_s is not None
            or settings.quota_fetch_bytes_per_s is not None
        )
        # Nothing to authenticate, authorize by ACL, sign or meter: the middleware steps aside.
        self.inspects_requests = self.uses_store or self.cluster_secret is not None
        self.principals: PrincipalStore | None = None
        self.acls: AclStore | None = None
        self.authorizer = Authorizer((), settings.super_user_names)
        self.quotas = QuotaManager(self._rate_of)
        self.oauth = _token_validator(settings) if self.auth_enabled else None
        self._quota_overrides: dict = {}
        self._keys: dict[bytes, _CachedKey] = {}
        self._instances: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._refreshed_s = 0.0
        self._refresh_lock = asyncio.Lock()
        self._verify_slots = asyncio.Semaphore(VERIFY_CONCURRENCY_MAX)
        self._dummy_key = ApiKey("", "", 0, None, {**new_hash_params(), "hash": ""})

    async def start(self) -> None:
        if not self.uses_store:
            return
        root = self.settings.data_dir
        self.principals = await asyncio.to_thread(PrincipalStore, root)
        self.acls = await asyncio.to_thread(AclStore, root)
        if self.auth_enabled and self.cluster_secret is None:
            self.cluster_secret = await asyncio.to_thread(self.principals.cluster_secret)
        self._rebuild()
        self._refreshed_s = time.monotonic()

    # ---- refresh ----

    async def maybe_refresh(self, *, force: bool = False) -> None:
        """Re-read the stores if `security_refresh_ms` has passed (or `force`)."""
        if self.principals is None or self.acls is None:
            return
        due_s = self._refreshed_s + self.settings.security_refresh_ms / 1000
        if not force and time.monotonic() < due_s:
            return
        async with self._refresh_lock:
            if not force and time.monotonic() < self._refreshed_s + (
                self.settings.security_refresh_ms / 1000
            ):
                return  # another request refreshed while we waited
            await asyncio.to_thread(self.principals.refresh)
            await asyncio.to_thread(self.acls.refresh)
            self._refreshed_s = time.monotonic()
            self._rebuild()

    def acls_changed(self) -> None:
        """Call after changing the ACL store on this node: decisions use it at once."""
        self._rebuild()

    def _rebuild(self) -> None:
        self.authorizer = Authorizer(self.acls.bindings(), self.settings.super_user_names)
        self._quota_overrides = self.principals.quotas()
        stored = {key.key_id for key in self.principals.api_keys()}
        self._keys = {h: c for h, c in self._keys.items() if c.key_id in stored}

    # ---- authentication ----

    async def authenticate(self, key_id: str, secret: str) -> str:
        """The principal of a valid, unexpired key.

        Raises:
            AuthenticationFailed: unknown key id, wrong secret, expired or revoked key (one
                message for all, and an unknown id costs the same scrypt run as a known one).
        """
        await self.maybe_refresh()  # drops revoked keys from the cache once due
        token_hash = hashlib.sha256(f"{key_id}.{secret}".encode()).digest()
        now_s = time.monotonic()
        cached = self._keys.get(token_hash)
        if cached is not None and cached.until_s > now_s:
            return cached.principal
        key = self.principals.api_key(key_id)
        if key is None:  # maybe created since the last refresh (e.g. by the CLI)
            await self.maybe_refresh(force=True)
            key = self.principals.api_key(key_id)
        async with self._verify_slots:
            matches = await asyncio.to_thread((key or self._dummy_key).matches, secret)
        now_ms = int(time.time() * 1000)
        if key is None or not matches or key.expired(now_ms):
            raise AuthenticationFailed()
        until_s = now_s + self.settings.auth_cache_ms / 1000
        if key.expires_at_ms is not None:
            until_s = min(until_s, now_s + (key.expires_at_ms - now_ms) / 1000)
        self._keys[token_hash] = _CachedKey(key.key_id, key.principal, until_s)
        return key.principal

    # ---- authorization ----

    def allowed(
        self, principal: str, host: str, operation: str, resource_type: str, name: str
    ) -> bool:
        if not self.acls_enabled:
            return True
        return self.authorizer.allowed(principal, host, operation, resource_type, name)

    def allowed_on_any(self, principal: str, host: str, operation: str, resource_type: str):
        if not self.acls_enabled:
            return True
        return self.authorizer.allowed_on_any(principal, host, operation, resource_type)

    # ---- producer ids and consumer instances bound to principals ----

    async def bind_producer(self, producer_id: int, principal: str) -> None:
        if self.auth_enabled:
            await asyncio.to_thread(self.principals.bind_producer, producer_id, principal)

    async def check_producer(self, producer_id: int, principal: str) -> None:
        """Raises AuthorizationFailed unless `principal` initialised this producer id."""
        if not self.auth_enabled or principal in self.settings.super_user_names:
            return
        owner = self.principals.producer_owner(producer_id)
        if owner != principal:  # maybe bound on another node since the last refresh
            await self.maybe_refresh(force=True)
            owner = self.principals.producer_owner(producer_id)
        if owner != principal:
            raise AuthorizationFailed(
                f"Producer id {producer_id} belongs to another principal: initialise your own "
                f"with POST /v3/clusters/{{cluster_id}}/producers."
            )

    def bind_instance(self, group: str, instance: str, principal: str) -> None:
        key = (group, instance)
        self._instances[key] = principal
        self._instances.move_to_end(key)
        while len(self._instances) > INSTANCE_BINDINGS_MAX:
            self._instances.popitem(last=False)

    def unbind_instance(self, group: str, instance: str) -> None:
        self._instances.pop((group, instance), None)

    def check_instance(self, group: str, instance: str, principal: str) -> None:
        """Raises AuthorizationFailed if another principal created this consumer instance."""
        if not self.auth_enabled:
            return
        owner = self._instances.get((group, instance))
        if owner is not None and owner != principal:
            raise AuthorizationFailed(
                f"Consumer instance '{instance}' of group '{group}' belongs to another principal."
            )

    async def authenticate_token(self, token: str) -> str:
        """The principal of a valid OAuth JWT (api/security/oauth.py).

        Raises:
            AuthenticationFailed: no OAuth configured, or the token does not verify.
        """
        if self.oauth is None:
            raise AuthenticationFailed()
        return await asyncio.to_thread(self.oauth.principal, token)

    # ---- SCRAM credentials ----

    async def scram_credential(self, principal: str, mechanism: str) -> ScramCredential | None:
        """The principal's credential for `mechanism`, read again from the store when this
        node does not know it (created since by another node or the CLI)."""
        if self.principals is None:
            return None
        await self.maybe_refresh()
        credential = self.principals.scram(principal, mechanism)
        if credential is None:
            await self.maybe_refresh(force=True)
            credential = self.principals.scram(principal, mechanism)
        return credential

    def scram_credentials(self) -> list[ScramCredential]:
        return [] if self.principals is None else self.principals.scram_credentials()

    async def set_scram_credential(self, credential: ScramCredential) -> None:
        """Store the credential (replacing the principal's one for its mechanism).

        Raises:
            SecurityDisabled: no principal store.
        """
        await asyncio.to_thread(self._store_for("SCRAM credentials").set_scram, credential)

    async def remove_scram_credential(self, principal: str, mechanism: str) -> None:
        """Raises:
        CredentialNotFound: the principal has no credential for `mechanism`.
        SecurityDisabled: no principal store.
        """
        store = self._store_for("SCRAM credentials")
        if not await asyncio.to_thread(store.remove_scram, principal, mechanism):
            raise CredentialNotFound("Attempt to delete a user credential that does not exist")

    def _store_for(self, what: str) -> PrincipalStore:
        if self.principals is None:
            raise SecurityDisabled(
                f"{what} need lakelog's principal store: turn on LAKELOG_AUTH, "
                "LAKELOG_AUTHORIZER or a LAKELOG_QUOTA_* default."
            )
        return self.principals

    # ---- quotas ----

    def quota_overrides(self) -> dict[str, Quota]:
        """The per-principal quota overrides in force (as last read), by principal."""
        return dict(self._quota_overrides)

    def default_quota(self) -> Quota:
        """This node's default byte rates (LAKELOG_QUOTA_*), for principals without their own."""
        settings = self.settings
        return Quota(settings.quota_produce_bytes_per_s, settings.quota_fetch_bytes_per_s)

    async def set_quota_override(self, principal: str, quota: Quota) -> None:
        """Store the principal's override (both rates None: remove it); in force here at once.

        Raises:
            SecurityDisabled: no principal store (no authentication, ACLs or quotas are on).
        """
        store = self._store_for("Quota overrides")
        if quota.produce_bytes_per_s is None and quota.fetch_bytes_per_s is None:
            await asyncio.to_thread(store.remove_quota, principal)
        else:
            await asyncio.to_thread(store.set_quota, principal, quota)
        self._rebuild()

    def _rate_of(self, principal: str, kind: str) -> int | None:
        override = self._quota_overrides.get(principal)
        if kind == PRODUCE:
            rate = override.produce_bytes_per_s if override else None
            return rate if rate is not None else self.settings.quota_produce_bytes_per_s
        if kind == FETCH:
            rate = override.fetch_bytes_per_s if override else None
            return rate if rate is not None else self.settings.quota_fetch_bytes_per_s
        return None


def _token_validator(settings: Settings) -> TokenValidator | None:
    if settings.oauth_jwks is None:
        return None
    return TokenValidator(
        settings.oauth_jwks,
        issuer=settings.oauth_issuer,
        audience=settings.oauth_audience,
        principal_claim=settings.oauth_principal_claim,
        leeway_ms=settings.oauth_leeway_ms,
        refresh_ms=settings.oauth_jwks_refresh_ms,
    )
