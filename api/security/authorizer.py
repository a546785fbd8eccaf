"""Kafka's ACL authorizer (`AclAuthorizer` semantics), pure: bindings in, a decision out.

Decision for (principal, host, operation, resource): a super user is allowed; else a matching
DENY (its operation, or ALL) denies; else a matching ALLOW allows, where as in Kafka an ALLOW of
READ, WRITE, DELETE or ALTER implies DESCRIBE and ALTER_CONFIGS implies DESCRIBE_CONFIGS; else
deny (`allow.everyone.if.no.acl.found=false`). A binding matches the principal if it names it or
`User:*`, the host if it is `*` or equal, and the resource if it has the same type and its
pattern is the literal name, the literal `*`, or (prefixed) a prefix of the name.
"""

from __future__ import annotations

from collections.abc import Iterable

from storage_layout.meta.acls import ANY_PRINCIPAL, WILDCARD, AclBinding

CLUSTER_RESOURCE_NAME = "kafka-cluster"  # the one cluster resource, named as in Kafka

IMPLIED_BY = {
    "DESCRIBE": frozenset({"READ", "WRITE", "DELETE", "ALTER"}),
    "DESCRIBE_CONFIGS": frozenset({"ALTER_CONFIGS"}),
}


class Authorizer:
    """An immutable snapshot of the bindings; rebuilt when the ACL store changes."""

    def __init__(self, bindings: Iterable[AclBinding], super_users: frozenset[str]) -> None:
        self.super_users = super_users
        self._by_type: dict[str, list[AclBinding]] = {}
        for binding in bindings:
            self._by_type.setdefault(binding.resource_type, []).append(binding)

    def allowed(
        self, principal: str, host: str, operation: str, resource_type: str, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        matching = [
            b
            for b in self._by_type.get(resource_type, ())
            if _principal_matches(b, principal)
            and _host_matches(b, host)
            and resource_matches(b, name)
        ]
        return _decide(matching, operation)

    def allowed_on_any(self, principal: str, host: str, operation: str, resource_type: str):
        """Kafka's `authorizeByResourceType`: some ALLOW for the operation on a resource of the
        type exists, and no DENY covers every resource of the type (literal `*` / prefix "")."""
        if principal in self.super_users:
            return True
        candidates = [
            b
            for b in self._by_type.get(resource_type, ())
            if _principal_matches(b, principal)
            and _host_matches(b, host)
            and b.operation in (operation, "ALL")
        ]
        if any(b.permission == "deny" and _covers_all(b) for b in candidates):
            return False
        return any(b.permission == "allow" for b in candidates)


def _decide(matching: list[AclBinding], operation: str) -> bool:
    if any(b.permission == "deny" and b.operation in (operation, "ALL") for b in matching):
        return False
    allowing = {operation, "ALL"} | IMPLIED_BY.get(operation, frozenset())
    return any(b.permission == "allow" and b.operation in allowing for b in matching)


def _principal_matches(binding: AclBinding, principal: str) -> bool:
    return binding.principal in (principal, ANY_PRINCIPAL)


def _host_matches(binding: AclBinding, host: str) -> bool:
    return binding.host in (WILDCARD, host)


def resource_matches(binding: AclBinding, name: str) -> bool:
    """The binding's pattern covers the resource `name` (literal, `*` or a prefix)."""
    if binding.pattern_type == "prefixed":
        return name.startswith(binding.resource_name)
    return binding.resource_name in (WILDCARD, name)


def _covers_all(binding: AclBinding) -> bool:
    if binding.pattern_type == "prefixed":
        return binding.resource_name == ""
    return binding.resource_name == WILDCARD
