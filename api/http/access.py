"""Authorization: the app-wide dependency that applies `rules.RULES`, and the checks routes make
on resources named in their bodies."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from fastapi import Request

from api.http.route_rules import CLUSTER, rule_for
from api.security.authorizer import CLUSTER_RESOURCE_NAME
from api.security.errors import AuthorizationFailed
from api.security.state import ANONYMOUS, SecurityState
from storage_layout.schemas.subjects import topic_of

log = logging.getLogger("lakelog.security")

SCOPE_KEY = "lakelog.security"


@dataclass(slots=True)
class RequestSecurity:
    """Who sent the request (set by the middleware) and what it is charged to."""

    principal: str
    host: str
    via_node: bool = False  # signed by another node, which authorized it already
    quota: str | None = None
    pending_bytes: int = 0  # request bytes received before the route's quota kind was known


def security_of(request: Request) -> SecurityState:
    return request.app.state.security


def context_of(request: Request) -> RequestSecurity:
    context = request.scope.get(SCOPE_KEY)
    return context if context is not None else RequestSecurity(ANONYMOUS, "*")


def acls_enabled(request: Request) -> bool:
    return security_of(request).acls_enabled


def principal_of(request: Request) -> str:
    return context_of(request).principal


async def authorize(request: Request) -> None:
    """App-wide dependency: the route's rule, applied before the route runs.

    Raises:
        AuthorizationFailed: the rule denies, or the route has no rule (fail closed).
        QuotaExceeded: the principal's bucket for this route's kind is in debt.
    """
    security, context = security_of(request), context_of(request)
    route = request.scope.get("route")
    rule = rule_for(request.method, getattr(route, "path", None))
    if rule is None:
        log.error("no authorization rule for %s %s", request.method, getattr(route, "path", "?"))
        raise AuthorizationFailed("This route has no authorization rule; refused.")
    if not security.inspects_requests:
        return  # security off: every rule allows (the produce/fetch path pays nothing more)
    await security.maybe_refresh()
    if rule.quota is not None:
        security.quotas.check(context.principal, rule.quota)
        context.quota = rule.quota
        security.quotas.charge(context.principal, rule.quota, context.pending_bytes)
        context.pending_bytes = 0
    if rule.kind == "node" and security.auth_enabled and not context.via_node:
        raise AuthorizationFailed("Node-to-node routes only accept signed node requests.")
    if rule.instance and security.auth_enabled:
        _check_instance(request, security, context)
    for check in rule.checks:
        name = (
            CLUSTER_RESOURCE_NAME if check.source == CLUSTER else request.path_params[check.source]
        )
        require(request, check.operation, check.resource_type, name)


def permits(request: Request, operation: str, resource_type: str, name: str) -> bool:
    context = context_of(request)
    if context.via_node:
        return True
    return security_of(request).allowed(
        context.principal, context.host, operation, resource_type, name
    )


def require(request: Request, operation: str, resource_type: str, name: str) -> None:
    """Raises AuthorizationFailed unless the principal may do `operation` on the resource."""
    if not permits(request, operation, resource_type, name):
        raise AuthorizationFailed(
            f"{principal_of(request)} is not authorized to {operation} {resource_type} '{name}'."
        )


def require_topics(request: Request, operation: str, topics: Iterable[str]) -> None:
    for name in sorted(set(topics)):
        require(request, operation, "topic", name)


def require_any(request: Request, checks: Iterable[tuple[str, str, str]]) -> None:
    """At least one (operation, resource_type, name) must be allowed."""
    checks = list(checks)
    if not any(permits(request, *check) for check in checks):
        wanted = " or ".join(f"{op} {rtype} '{name}'" for op, rtype, name in checks)
        raise AuthorizationFailed(f"{principal_of(request)} is not authorized to {wanted}.")


def require_subject(request: Request, operation: str, subject: str) -> None:
    """A change to a registry subject: `operation` on the subject, or on the topic that a
    `<topic>-key` / `<topic>-value` subject names."""
    checks = [(operation, "subject", subject)]
    topic = topic_of(subject)
    if topic is not None:
        checks.append((operation, "topic", topic))
    require_any(request, checks)


def permits_on_any(request: Request, operation: str, resource_type: str) -> bool:
    context = context_of(request)
    if context.via_node:
        return True
    return security_of(request).allowed_on_any(
        context.principal, context.host, operation, resource_type
    )


def _check_instance(request: Request, security: SecurityState, context) -> None:
    """Instances live on their group's coordinator: only that node knows their owners."""
    group = request.path_params["group"]
    if request.app.state.broker.groups.remote_url(group) is None:
        security.check_instance(group, request.path_params["instance"], context.principal)


def bind_instance(request: Request, group: str, instance: str) -> None:
    security_of(request).bind_instance(group, instance, principal_of(request))


def unbind_instance(request: Request, group: str, instance: str) -> None:
    security_of(request).unbind_instance(group, instance)


async def bind_producer(request: Request, producer_id: int) -> None:
    await security_of(request).bind_producer(producer_id, principal_of(request))


def check_transactional(request: Request, idempotence) -> None:
    """A produce within a transaction needs WRITE on its transactional id (as Kafka's
    AddPartitionsToTxn does)."""
    if idempotence.transactional_id is not None:
        require(request, "WRITE", "transactional_id", idempotence.transactional_id)


async def check_producer(request: Request, producer_id: int) -> None:
    if not context_of(request).via_node:
        await security_of(request).check_producer(producer_id, principal_of(request))
