"""DescribeClientQuotas and AlterClientQuotas (kafka-configs --entity-type users) over lakelog's
quotas: per-principal byte rates (api/security/quotas.py). Kafka's `user` entity is a principal
(`alice` is `User:alice`); `producer_byte_rate` is its produce rate, `consumer_byte_rate` its
fetch rate. The default user entity is the node's LAKELOG_QUOTA_* default, read-only here. No
quotas are kept per client id or IP, nor any request_percentage or controller_mutation_rate:
describing them finds nothing, setting them is refused."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from api.core.errors import InvalidRequest
from api.kafka.connection import Connection
from api.kafka.errors import error_code, error_message
from api.security.authorizer import CLUSTER_RESOURCE_NAME
from storage_layout.meta.principals import USER_PREFIX, Quota, normalize_principal

USER = "user"
EXACT, DEFAULT, ANY = 0, 1, 2  # DescribeClientQuotas match types
PRODUCE_RATE, FETCH_RATE = "producer_byte_rate", "consumer_byte_rate"
FIELDS = {PRODUCE_RATE: "produce_bytes_per_s", FETCH_RATE: "fetch_bytes_per_s"}


async def describe_client_quotas(connection: Connection, request, version: int) -> dict:
    answer = {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None}
    if not connection.permits("DESCRIBE_CONFIGS", "cluster", CLUSTER_RESOURCE_NAME):
        refused = ErrorCode.cluster_authorization_failed
        return answer | {"error_code": refused, "entries": None}
    users = [c for c in request.components if c.entity_type == USER]
    if len(users) != len(request.components) or len(users) > 1:
        return answer | {"entries": []}  # only user entities have quotas here
    security = connection.security
    described = {
        USER_PREFIX + name if name is not None else None: quota
        for name, quota in _user_quotas(security).items()
    }
    entries = [
        _entry(principal, quota)
        for principal, quota in sorted(described.items(), key=lambda item: item[0] or "")
        if not users or _matches(users[0], principal)
    ]
    return answer | {"entries": [entry for entry in entries if entry["values"]]}


def _user_quotas(security) -> dict[str | None, Quota]:
    """User name (None: the default entity) -> its quota."""
    quotas: dict[str | None, Quota] = {None: security.default_quota()}
    for principal, quota in security.quota_overrides().items():
        quotas[principal.removeprefix(USER_PREFIX)] = quota
    return quotas


def _matches(component, principal: str | None) -> bool:
    if component.match_type == ANY:
        return True
    if component.match_type == DEFAULT:
        return principal is None
    return principal == USER_PREFIX + (component.match or "")


def _entry(principal: str | None, quota: Quota) -> dict:
    name = None if principal is None else principal.removeprefix(USER_PREFIX)
    values = [
        {"key": key, "value": float(getattr(quota, field))}
        for key, field in FIELDS.items()
        if getattr(quota, field) is not None
    ]
    return {"entity": [{"entity_type": USER, "entity_name": name}], "values": values}


async def alter_client_quotas(connection: Connection, request, version: int) -> dict:
    allowed = connection.permits("ALTER_CONFIGS", "cluster", CLUSTER_RESOURCE_NAME)
    results = [
        await _alter(connection, entry, request.validate_only, allowed) for entry in request.entries
    ]
    return {"throttle_time": 0, "entries": results}


async def _alter(connection: Connection, entry, validate_only: bool, allowed: bool) -> dict:
    entity = [{"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]
    answer = {"error_code": ErrorCode.none, "error_message": None, "entity": entity}
    if not allowed:
        return answer | {"error_code": ErrorCode.cluster_authorization_failed}
    try:
        principal = _principal_of(entry.entity)
        security = connection.security
        current = security.quota_overrides().get(principal, Quota())
        changed = _changed(current, entry.ops)
        if not validate_only:
            await security.set_quota_override(principal, changed)
    except Exception as error:
        return answer | {"error_code": error_code(error), "error_message": error_message(error)}
    return answer


def _principal_of(entity) -> str:
    """The principal of an entity that is one named user.

    Raises:
        InvalidRequest: another entity (the default user, a client id, an IP, a mix).
    """
    if len(entity) != 1 or entity[0].entity_type != USER:
        raise InvalidRequest("Quotas are kept per user only (not per client id or IP).")
    if entity[0].entity_name is None:
        raise InvalidRequest(
            "The default user quotas are each node's LAKELOG_QUOTA_PRODUCE_BYTES_PER_S and "
            "LAKELOG_QUOTA_FETCH_BYTES_PER_S; set a user's own quota instead."
        )
    return normalize_principal(entity[0].entity_name)


def _changed(current: Quota, ops) -> Quota:
    """`current` after the ops (a value sets a rate, `remove` drops it).

    Raises:
        InvalidRequest: a key other than the two byte rates, or a rate that is not positive.
    """
    rates = {field: getattr(current, field) for field in FIELDS.values()}
    for op in ops:
        if op.key not in FIELDS:
            raise InvalidRequest(
                f"Quota '{op.key}' is not kept here: {PRODUCE_RATE} and {FETCH_RATE} are."
            )
        if op.remove:
            rates[FIELDS[op.key]] = None
        elif op.value <= 0 or op.value != int(op.value):
            raise InvalidRequest(f"{op.key} must be a whole number of bytes per second > 0.")
        else:
            rates[FIELDS[op.key]] = int(op.value)
    return Quota(**rates)
