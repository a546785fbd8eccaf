"""ACLs, as Confluent's v3 ACL API: `GET|POST|DELETE /v3/clusters/{c}/acls`.

Enums are Confluent's upper case on the wire (TOPIC, LITERAL, ALLOW); GET and DELETE take the
same filters as query parameters, absent or ANY matching any value (DELETE with no filter at all
is refused, as removing every ACL by accident is worse than a 400). Changes need ALTER on the
cluster, listing DESCRIBE on the cluster (`api/http/route_rules.py`).
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Body, Depends, Query, Request
from pydantic import BaseModel
from starlette.responses import Response

from api.http.access import security_of
from api.http.deps import BrokerDep, base_url
from api.http.errors import ApiError
from api.http.routes.v3_topics import check_cluster
from storage_layout.meta.acls import AclBinding, AclFilter

router = APIRouter(prefix="/v3", tags=["v3 acls"])

FILTER_FIELDS = (
    "principal",
    "operation",
    "permission",
    "resource_type",
    "resource_name",
    "pattern_type",
    "host",
)


class CreateAcl(BaseModel):
    resource_type: str
    resource_name: str
    pattern_type: str = "LITERAL"
    principal: str
    host: str = "*"
    operation: str
    permission: str


def acl_filter_query(
    resource_type: Annotated[str | None, Query()] = None,
    resource_name: Annotated[str | None, Query()] = None,
    pattern_type: Annotated[str | None, Query()] = None,
    principal: Annotated[str | None, Query()] = None,
    host: Annotated[str | None, Query()] = None,
    operation: Annotated[str | None, Query()] = None,
    permission: Annotated[str | None, Query()] = None,
) -> AclFilter:
    """The filter of the list and delete routes, from query parameters (`ANY` = no filter)."""
    values = {
        "resource_type": resource_type,
        "resource_name": resource_name,
        "pattern_type": pattern_type,
        "principal": principal,
        "host": host,
        "operation": operation,
        "permission": permission,
    }
    return AclFilter(
        **{k: (None if v is None or v.upper() == "ANY" else v) for k, v in values.items()}
    )


def _acl_data(url: str, cluster_id: str, binding: AclBinding) -> dict:
    return {
        "kind": "KafkaAcl",
        "metadata": {"self": f"{url}/v3/clusters/{cluster_id}/acls"},
        "cluster_id": cluster_id,
        "resource_type": binding.resource_type.upper(),
        "resource_name": binding.resource_name,
        "pattern_type": binding.pattern_type.upper(),
        "principal": binding.principal,
        "host": binding.host,
        "operation": binding.operation,
        "permission": binding.permission.upper(),
    }


def _list(url: str, cluster_id: str, bindings: list[AclBinding]) -> dict:
    return {
        "kind": "KafkaAclList",
        "metadata": {"self": f"{url}/v3/clusters/{cluster_id}/acls", "next": None},
        "data": [_acl_data(url, cluster_id, b) for b in bindings],
    }


def _store(request: Request):
    store = security_of(request).acls
    if store is None:
        raise ApiError(
            400, 40002, "ACLs are not enabled on this gateway: set LAKELOG_AUTHORIZER=acl."
        )
    return store


@router.get("/clusters/{cluster_id}/acls", summary="List ACLs matching the filters")
async def list_acls(
    cluster_id: str,
    request: Request,
    broker: BrokerDep,
    acl_filter: Annotated[AclFilter, Depends(acl_filter_query)],
) -> dict:
    check_cluster(cluster_id, broker.settings)
    store = _store(request)
    await asyncio.to_thread(store.refresh)
    bindings = store.bindings(acl_filter)
    return _list(base_url(request, broker.settings), cluster_id, bindings)


@router.post("/clusters/{cluster_id}/acls", status_code=201, summary="Create an ACL")
async def create_acl(
    cluster_id: str, body: Annotated[CreateAcl, Body()], request: Request, broker: BrokerDep
) -> Response:
    check_cluster(cluster_id, broker.settings)
    binding = AclBinding.parse(**body.model_dump())
    store = _store(request)
    await asyncio.to_thread(store.add, binding)
    security_of(request).acls_changed()
    return Response(status_code=201)


@router.delete("/clusters/{cluster_id}/acls", summary="Delete the ACLs matching the filters")
async def delete_acls(
    cluster_id: str,
    request: Request,
    broker: BrokerDep,
    acl_filter: Annotated[AclFilter, Depends(acl_filter_query)],
) -> dict:
    check_cluster(cluster_id, broker.settings)
    if acl_filter == AclFilter():
        raise ApiError(400, 40002, "Give at least one filter (e.g. resource_type=TOPIC).")
    store = _store(request)
    removed = await asyncio.to_thread(store.remove, acl_filter)
    security_of(request).acls_changed()
    return {"data": [_acl_data(base_url(request, broker.settings), cluster_id, b) for b in removed]}
