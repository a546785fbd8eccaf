"""Kafka-style ACL bindings: `_meta/acls`, a `DocumentTable` of kind `acl`.

A binding reads "Principal P is Allowed/Denied Operation O From Host H on any Resource R matching
ResourcePattern RP" (Kafka's wording). Its name in the table is a hash of its fields, so adding
the same binding twice stores it once, and removing it deletes that one document.

Concurrency contract: as `DocumentTable`'s.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

from storage_layout.errors import InvalidConfig
from storage_layout.meta.documents import DocumentTable
from storage_layout.meta.principals import PRINCIPAL_PATTERN

ACLS_TABLE = "acls"
KIND_ACL = "acl"

OPERATIONS = (
    "ALL",
    "READ",
    "WRITE",
    "CREATE",
    "DELETE",
    "ALTER",
    "DESCRIBE",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
)
# `subject` (a schema registry subject) is lakelog's own: Kafka's protocol has no such type.
RESOURCE_TYPES = ("topic", "group", "cluster", "transactional_id", "subject")
PATTERN_TYPES = ("literal", "prefixed")
PERMISSIONS = ("allow", "deny")
WILDCARD = "*"  # as a literal resource name: every resource; as a principal name: everyone
ANY_PRINCIPAL = "User:*"


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL. `resource_name` "*" with `pattern_type` literal matches every resource."""

    principal: str
    operation: str
    permission: str
    resource_type: str
    resource_name: str
    pattern_type: str = "literal"
    host: str = WILDCARD

    @classmethod
    def parse(cls, **fields: str | None) -> AclBinding:
        """Validate and normalize (case of enums, `alice` -> `User:alice`).

        Raises:
            InvalidConfig: a field is missing or not one of the allowed values.
        """
        principal = fields.get("principal") or ""
        if principal != ANY_PRINCIPAL:
            principal = principal if principal.startswith("User:") else f"User:{principal}"
            if not PRINCIPAL_PATTERN.match(principal):
                raise InvalidConfig(f"Invalid ACL principal '{fields.get('principal')}'.")
        binding = cls(
            principal=principal,
            operation=_choice(fields, "operation", OPERATIONS, upper=True),
            permission=_choice(fields, "permission", PERMISSIONS),
            resource_type=_choice(fields, "resource_type", RESOURCE_TYPES),
            resource_name=fields.get("resource_name") or "",
            pattern_type=_choice(
                {**fields, "pattern_type": fields.get("pattern_type") or "literal"},
                "pattern_type",
                PATTERN_TYPES,
            ),
            host=fields.get("host") or WILDCARD,
        )
        if not binding.resource_name:
            raise InvalidConfig("An ACL needs a resource name ('*' for every resource).")
        return binding

    @property
    def acl_id(self) -> str:
        fields = "\x00".join(asdict(self).values())
        return hashlib.sha256(fields.encode()).hexdigest()[:32]

    def to_document(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Which bindings to list or remove: None matches any value (Kafka's ANY)."""

    principal: str | None = None
    operation: str | None = None
    permission: str | None = None
    resource_type: str | None = None
    resource_name: str | None = None
    pattern_type: str | None = None
    host: str | None = None

    def matches(self, binding: AclBinding) -> bool:
        return all(
            want is None or getattr(binding, name).lower() == want.lower()
            for name, want in asdict(self).items()
        )


class AclStore:
    """Adds, lists and removes the bindings in `<root>/_meta/acls`."""

    def __init__(self, root: str) -> None:
        self.table = DocumentTable(root, ACLS_TABLE)
        self.table.refresh()

    def refresh(self) -> bool:
        return self.table.refresh()

    def add(self, binding: AclBinding) -> bool:
        """Store `binding`; False if it was already there."""
        return self.table.put(KIND_ACL, binding.acl_id, binding.to_document(), create_only=True)

    def bindings(self, acl_filter: AclFilter | None = None) -> list[AclBinding]:
        found = [AclBinding(**doc) for doc in self.table.documents(KIND_ACL).values()]
        chosen = [b for b in found if acl_filter is None or acl_filter.matches(b)]
        return sorted(chosen, key=lambda b: tuple(asdict(b).values()))

    def remove(self, acl_filter: AclFilter) -> list[AclBinding]:
        """Delete every binding the filter matches; returns them."""
        removed = self.bindings(acl_filter)
        for binding in removed:
            self.table.put(KIND_ACL, binding.acl_id, None)
        return removed


def _choice(fields: dict, name: str, allowed: tuple[str, ...], *, upper: bool = False) -> str:
    value = (fields.get(name) or "").strip()
    value = value.upper() if upper else value.lower()
    if value not in allowed:
        raise InvalidConfig(f"ACL {name} '{fields.get(name)}' is not one of {', '.join(allowed)}.")
    return value
