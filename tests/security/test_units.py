"""Security pieces without a gateway: key hashing, the authorizer, the route table, quotas,
node signatures, credential parsing."""

from __future__ import annotations

import base64
import inspect
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fastapi.routing import iter_route_contexts

from api.http.app import create_app
from api.http.errors import error_response
from api.http.route_rules import RULES, rule_for
from api.http.security_middleware import parse_credentials
from api.security import node_auth
from api.security.authorizer import Authorizer
from api.security.errors import AuthenticationFailed, QuotaExceeded
from api.security.quotas import QuotaManager
from conf.settings import Settings
from storage_layout.meta import principals as principals_module
from storage_layout.meta.acls import AclBinding, AclFilter, AclStore
from storage_layout.meta.principals import PrincipalStore


def acl(principal, operation, name, *, permission="allow", pattern="literal", rtype="topic"):
    return AclBinding.parse(
        principal=principal,
        operation=operation,
        permission=permission,
        resource_type=rtype,
        resource_name=name,
        pattern_type=pattern,
    )


# ---- stores ----------------------------------------------------------------------------------


def test_key_secret_is_stored_hashed_never_in_plaintext(tmp_path):
    """The secret appears nowhere under the root; only its salted scrypt hash is kept."""
    store = PrincipalStore(str(tmp_path))
    store.add_principal("alice")
    key_id, secret = store.create_key("alice")
    stored = b"".join(p.read_bytes() for p in Path(tmp_path).rglob("*") if p.is_file())
    assert key_id.encode() in stored  # the store is where we think it is
    assert secret.encode() not in stored
    key = store.api_key(key_id)
    assert key.document["kdf"] == "scrypt" and key.document["hash"] != secret
    assert key.matches(secret) and not key.matches(secret + "x")


def test_key_check_uses_constant_time_compare(tmp_path, monkeypatch):
    """Verification goes through hmac.compare_digest, not ==."""
    store = PrincipalStore(str(tmp_path))
    store.add_principal("alice")
    key_id, secret = store.create_key("alice")
    calls = []
    real = principals_module.hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(principals_module.hmac, "compare_digest", spy)
    assert store.api_key(key_id).matches(secret)
    assert len(calls) == 1


def test_stores_are_shared_through_the_root(tmp_path):
    """A second store on the same root (another node, the CLI) sees changes after refresh."""
    first, second = PrincipalStore(str(tmp_path)), PrincipalStore(str(tmp_path))
    first.add_principal("bob")
    key_id, _ = first.create_key("bob")
    second.refresh()
    assert second.api_key(key_id).principal == "User:bob"
    second.revoke_key(key_id)
    first.refresh()
    assert first.api_key(key_id) is None
    acls = AclStore(str(tmp_path))
    assert acls.add(acl("User:bob", "READ", "t")) and not acls.add(acl("User:bob", "READ", "t"))
    assert len(acls.remove(AclFilter(resource_name="t"))) == 1 and acls.bindings() == []


def test_nodes_racing_to_make_the_cluster_secret_all_get_the_same_one(tmp_path):
    """Auth on without LAKELOG_CLUSTER_SECRET: nodes starting at once on one root each make a
    candidate; one wins and every node (and a later one) signs with the winner's."""
    stores = [PrincipalStore(str(tmp_path)) for _ in range(4)]
    with ThreadPoolExecutor(len(stores)) as pool:
        secrets_made = list(pool.map(PrincipalStore.cluster_secret, stores))
    assert len(set(secrets_made)) == 1 and len(secrets_made[0]) == 32
    assert PrincipalStore(str(tmp_path)).cluster_secret() == secrets_made[0]
    assert PrincipalStore(str(tmp_path)).principals() == []  # not listed as a principal


def test_short_cluster_secret_is_refused_and_none_is_allowed_with_auth_on():
    with pytest.raises(ValueError, match="16"):
        Settings(auth="api-keys", cluster_secret="short")
    assert Settings(auth="api-keys").cluster_secret is None


# ---- authorizer --------------------------------------------------------------------------------


def test_deny_beats_allow():
    authorizer = Authorizer(
        [acl("User:*", "ALL", "*"), acl("User:eve", "READ", "secret", permission="deny")],
        frozenset(),
    )
    assert authorizer.allowed("User:eve", "1.2.3.4", "READ", "topic", "public")
    assert not authorizer.allowed("User:eve", "1.2.3.4", "READ", "topic", "secret")
    assert authorizer.allowed("User:eve", "1.2.3.4", "WRITE", "topic", "secret")


def test_prefixed_patterns_and_no_match_deny():
    authorizer = Authorizer(
        [acl("User:billing", "WRITE", "payments.", pattern="prefixed")], frozenset()
    )
    assert authorizer.allowed("User:billing", "h", "WRITE", "topic", "payments.eu")
    assert authorizer.allowed("User:billing", "h", "DESCRIBE", "topic", "payments.eu")  # implied
    assert not authorizer.allowed("User:billing", "h", "WRITE", "topic", "paymentsX")
    assert not authorizer.allowed("User:billing", "h", "READ", "topic", "payments.eu")
    assert not authorizer.allowed("User:billing", "h", "WRITE", "group", "payments.eu")
    assert not authorizer.allowed("User:other", "h", "WRITE", "topic", "payments.eu")


def test_super_user_and_host():
    authorizer = Authorizer(
        [acl("User:*", "ALL", "*", permission="deny")], frozenset({"User:admin"})
    )
    assert authorizer.allowed("User:admin", "h", "DELETE", "topic", "anything")
    assert not authorizer.allowed("User:bob", "h", "READ", "topic", "anything")
    binding = AclBinding.parse(
        principal="bob",
        operation="READ",
        permission="allow",
        resource_type="topic",
        resource_name="t",
        host="10.0.0.1",
    )
    authorizer = Authorizer([binding], frozenset())
    assert authorizer.allowed("User:bob", "10.0.0.1", "READ", "topic", "t")
    assert not authorizer.allowed("User:bob", "10.0.0.2", "READ", "topic", "t")


def test_idempotent_write_by_resource_type():
    """Kafka's KIP-679: WRITE on some topic lets a principal init an idempotent producer."""
    writer = Authorizer([acl("User:w", "WRITE", "x.", pattern="prefixed")], frozenset())
    assert writer.allowed_on_any("User:w", "h", "WRITE", "topic")
    assert not writer.allowed_on_any("User:r", "h", "WRITE", "topic")


@pytest.mark.parametrize(
    "bad", [{"operation": "EAT"}, {"resource_type": "table"}, {"principal": "a b"}]
)
def test_invalid_bindings_are_refused(bad):
    from storage_layout.errors import InvalidConfig

    fields = {
        "principal": "a",
        "operation": "READ",
        "permission": "allow",
        "resource_type": "topic",
        "resource_name": "t",
    }
    with pytest.raises(InvalidConfig):
        AclBinding.parse(**{**fields, **bad})


# ---- the route table ---------------------------------------------------------------------------


def _app_routes():
    app = create_app(Settings(data_dir="/nonexistent-never-started"))
    for route in iter_route_contexts(app.routes):
        for method in sorted(route.methods or ()):
            yield method, route.path, route.endpoint


def test_every_route_has_an_authorization_rule():
    """Walks the app's route table: a route without a rule fails here (and is refused at run
    time, since the authorization dependency fails closed)."""
    missing = [f"{m} {p}" for m, p, _ in _app_routes() if rule_for(m, p) is None]
    assert missing == []


def test_rules_name_only_existing_routes_and_route_checks_exist():
    """No stale rules; a rule that leaves checks to the route is backed by code in that route."""
    routes = {(m, p.rstrip("/") or "/"): endpoint for m, p, endpoint in _app_routes()}
    assert set(RULES) - set(routes) == set()
    for key, rule in RULES.items():
        if rule.kind in ("route", "filter") or rule.also:
            module = inspect.getmodule(inspect.unwrap(routes[key]))
            assert "access." in inspect.getsource(module), key


# ---- quotas, signatures, credentials ----------------------------------------------------------


def test_token_bucket_throttles_after_the_rate_is_used():
    now = [100.0]
    quotas = QuotaManager(lambda principal, kind: 1000, clock=lambda: now[0])
    quotas.check("User:a", "produce")
    quotas.charge("User:a", "produce", 3000)  # 1000 tokens - 3000 = 2 s of debt
    with pytest.raises(QuotaExceeded) as raised:
        quotas.check("User:a", "produce")
    assert raised.value.retry_after_s == 2
    response = error_response(raised.value)
    assert response.headers["Retry-After"] == "2" and response.status_code == 429
    quotas.check("User:b", "produce")  # per principal
    now[0] += 2.01
    quotas.check("User:a", "produce")
    unlimited = QuotaManager(lambda principal, kind: None)
    unlimited.charge("User:a", "fetch", 10**12)
    unlimited.check("User:a", "fetch")


def test_node_signature_binds_method_path_principal_and_time(monkeypatch):
    secret = b"s" * 32
    header = node_auth.sign(secret, method="POST", path="/a", principal="User:x", node_id=1)
    assert node_auth.verify(secret, header, method="POST", path="/a") == "User:x"
    assert node_auth.verify(secret, header, method="POST", path="/b") is None
    assert node_auth.verify(b"t" * 32, header, method="POST", path="/a") is None
    forged = header.replace("User:x", "User:admin")
    assert node_auth.verify(secret, forged, method="POST", path="/a") is None
    monkeypatch.setattr(node_auth.time, "time", lambda: 10**10)
    assert node_auth.verify(secret, header, method="POST", path="/a") is None  # too old


def test_credentials_parse_bearer_and_basic_only():
    assert parse_credentials("Bearer abc.def.g") == ("abc", "def.g")
    basic = base64.b64encode(b"abc:se:cret").decode()
    assert parse_credentials(f"Basic {basic}") == ("abc", "se:cret")
    for bad in (None, "", "Bearer abc", "Token abc.def", "Basic !!!", "Bearer .x"):
        with pytest.raises(AuthenticationFailed):
            parse_credentials(bad)
