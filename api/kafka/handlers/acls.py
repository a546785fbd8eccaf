"""DescribeAcls, CreateAcls and DeleteAcls over lakelog's ACL store (the one the HTTP v3 ACL
API and `lakelog acls` change). Kafka's enums travel as small integers; a MATCH pattern filter
finds the bindings that apply to the named resource (literal, `*` and prefixes), as Kafka's."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from api.kafka.connection import Connection
from api.kafka.errors import error_code, error_message
from api.security.authorizer import CLUSTER_RESOURCE_NAME, resource_matches
from storage_layout.meta.acls import AclBinding, AclFilter

RESOURCE_TYPES = {2: "topic", 3: "group", 4: "cluster", 5: "transactional_id"}
PATTERN_TYPES = {3: "literal", 4: "prefixed"}
OPERATIONS = {
    2: "ALL",
    3: "READ",
    4: "WRITE",
    5: "CREATE",
    6: "DELETE",
    7: "ALTER",
    8: "DESCRIBE",
    10: "DESCRIBE_CONFIGS",
    11: "ALTER_CONFIGS",
    12: "IDEMPOTENT_WRITE",
}
PERMISSIONS = {2: "deny", 3: "allow"}
ANY, MATCH = 1, 2


class UnsupportedAclValue(ValueError):
    """An enum value lakelog's ACLs do not have (e.g. the DELEGATION_TOKEN resource type)."""


async def describe_acls(connection: Connection, request, version: int) -> dict:
    store = connection.security.acls
    try:
        connection.check("DESCRIBE", "cluster", CLUSTER_RESOURCE_NAME)
        _check_enabled(store)
        await asyncio.to_thread(store.refresh)
        bindings = _matching(store.bindings(), request)
    except Exception as error:
        return _describe_error(error)
    grouped: dict[tuple, list[dict]] = {}
    for binding in bindings:
        resource = (binding.resource_type, binding.resource_name, binding.pattern_type)
        grouped.setdefault(resource, []).append(_description(binding))
    resources = [
        {
            "resource_type": _code(RESOURCE_TYPES, rtype),
            "resource_name": name,
            "pattern_type": _code(PATTERN_TYPES, pattern),
            "acls": acls,
        }
        for (rtype, name, pattern), acls in grouped.items()
    ]
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "resources": resources,
    }


async def create_acls(connection: Connection, request, version: int) -> dict:
    store = connection.security.acls
    results = []
    for creation in request.creations:
        try:
            connection.check("ALTER", "cluster", CLUSTER_RESOURCE_NAME)
            _check_enabled(store)
            binding = AclBinding.parse(
                principal=creation.principal,
                operation=_name(OPERATIONS, creation.operation),
                permission=_name(PERMISSIONS, creation.permission_type),
                resource_type=_name(RESOURCE_TYPES, creation.resource_type),
                resource_name=creation.resource_name,
                pattern_type=_name(PATTERN_TYPES, creation.resource_pattern_type),
                host=creation.host,
            )
            await asyncio.to_thread(store.add, binding)
            results.append({"error_code": ErrorCode.none, "error_message": None})
        except Exception as error:
            results.append({"error_code": _acl_error(error), "error_message": error_message(error)})
    if store is not None:
        connection.security.acls_changed()
    return {"throttle_time": 0, "results": results}


async def delete_acls(connection: Connection, request, version: int) -> dict:
    store = connection.security.acls
    results = []
    for acl_filter in request.filters:
        try:
            connection.check("ALTER", "cluster", CLUSTER_RESOURCE_NAME)
            _check_enabled(store)
            await asyncio.to_thread(store.refresh)
            doomed = _matching(store.bindings(), acl_filter)
            for binding in doomed:
                await asyncio.to_thread(store.remove, _exactly(binding))
            matching = [{"error_code": ErrorCode.none, **_deleted(b)} for b in doomed]
            results.append(
                {"error_code": ErrorCode.none, "error_message": None, "matching_acls": matching}
            )
        except Exception as error:
            results.append(
                {
                    "error_code": _acl_error(error),
                    "error_message": error_message(error),
                    "matching_acls": [],
                }
            )
    if store is not None:
        connection.security.acls_changed()
    return {"throttle_time": 0, "filter_results": results}


def _matching(bindings: list[AclBinding], kafka_filter) -> list[AclBinding]:
    """The bindings a Kafka ACL filter selects (ANY fields match everything)."""
    wanted = AclFilter(
        principal=kafka_filter.principal_filter,
        operation=_optional(OPERATIONS, kafka_filter.operation),
        permission=_optional(PERMISSIONS, kafka_filter.permission_type),
        resource_type=_optional(RESOURCE_TYPES, kafka_filter.resource_type_filter),
        host=kafka_filter.host_filter,
    )
    # lakelog's own resource types (registry subjects) have no code in Kafka's protocol
    kafka_types = set(RESOURCE_TYPES.values())
    selected = [b for b in bindings if b.resource_type in kafka_types and wanted.matches(b)]
    name = kafka_filter.resource_name_filter
    pattern = kafka_filter.pattern_type_filter
    if pattern == MATCH:
        return [b for b in selected if name is None or resource_matches(b, name)]
    if pattern != ANY:
        pattern_name = _name(PATTERN_TYPES, pattern)
        selected = [b for b in selected if b.pattern_type == pattern_name]
    return [b for b in selected if name is None or b.resource_name == name]


def _exactly(binding: AclBinding) -> AclFilter:
    return AclFilter(
        binding.principal,
        binding.operation,
        binding.permission,
        binding.resource_type,
        binding.resource_name,
        binding.pattern_type,
        binding.host,
    )


def _description(binding: AclBinding) -> dict:
    return {
        "principal": binding.principal,
        "host": binding.host,
        "operation": _code(OPERATIONS, binding.operation),
        "permission_type": _code(PERMISSIONS, binding.permission),
    }


def _deleted(binding: AclBinding) -> dict:
    return {
        "error_message": None,
        "resource_type": _code(RESOURCE_TYPES, binding.resource_type),
        "resource_name": binding.resource_name,
        "pattern_type": _code(PATTERN_TYPES, binding.pattern_type),
        **_description(binding),
    }


def _check_enabled(store) -> None:
    if store is None:
        raise UnsupportedAclValue("ACLs are off on this cluster: set LAKELOG_AUTHORIZER=acl.")


def _acl_error(error: Exception) -> ErrorCode:
    if isinstance(error, UnsupportedAclValue):
        return ErrorCode.security_disabled if "are off" in str(error) else ErrorCode.invalid_request
    return error_code(error)


def _describe_error(error: Exception) -> dict:
    return {
        "throttle_time": 0,
        "error_code": _acl_error(error),
        "error_message": error_message(error),
        "resources": [],
    }


def _name(table: dict[int, str], code: int) -> str:
    if code not in table:
        raise UnsupportedAclValue(f"ACL enum value {code} is not supported here.")
    return table[code]


def _optional(table: dict[int, str], code: int) -> str | None:
    return None if code == ANY else _name(table, code)


def _code(table: dict[int, str], name: str) -> int:
    return next(code for code, value in table.items() if value == name.upper() or value == name)
