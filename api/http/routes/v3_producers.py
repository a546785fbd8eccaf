"""Idempotent producer ids (lakelog extension): `POST /v3/clusters/{c}/producers`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request
from pydantic import BaseModel, Field

from api.http import access
from api.http.deps import BrokerDep
from api.http.routes.v3_topics import check_cluster
from api.http.routes.v3_transactions import TIMEOUT_MS_DEFAULT, begin_transactions
from api.security.authorizer import CLUSTER_RESOURCE_NAME

router = APIRouter(prefix="/v3", tags=["v3 producers"])


class InitProducer(BaseModel):
    transactional_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=249,
        description="Re-initialising the same id returns the same producer_id with the epoch "
        "bumped, which fences the previous epoch and aborts its open transaction (as "
        "`POST /v3/clusters/{c}/transactions/{id}/begin`, with a 60 s transaction timeout).",
    )
    client_id: str | None = Field(default=None, max_length=249)


class ProducerIdResponse(BaseModel):
    producer_id: int
    producer_epoch: int


@router.post(
    "/clusters/{cluster_id}/producers",
    summary="Initialise an idempotent producer (lakelog extension)",
    description="Returns a producer id and epoch to stamp on produce requests together with "
    "per-partition sequences (v2 `base_sequence`/`base_sequences`, v3 `sequence`). Ids are "
    "unique across every gateway node sharing the storage root.",
    response_model=ProducerIdResponse,
)
async def init_producer(
    cluster_id: str,
    request: Request,
    broker: BrokerDep,
    body: Annotated[InitProducer | None, Body()] = None,
) -> ProducerIdResponse:
    check_cluster(cluster_id, broker.settings)
    body = body or InitProducer()
    _authorize_init(request, body)
    if body.transactional_id is not None:  # through its transaction coordinator: as begin
        identity = await begin_transactions(
            request, broker, body.transactional_id, TIMEOUT_MS_DEFAULT
        )
    else:
        identity = await broker.init_producer(None, body.client_id)
        await access.bind_producer(request, identity.producer_id)
    return ProducerIdResponse(
        producer_id=identity.producer_id, producer_epoch=identity.producer_epoch
    )


def _authorize_init(request: Request, body: InitProducer) -> None:
    """Kafka's InitProducerId: WRITE on the transactional id; without one, IDEMPOTENT_WRITE on
    the cluster or (KIP-679) WRITE on some topic."""
    if body.transactional_id is not None:
        access.require(request, "WRITE", "transactional_id", body.transactional_id)
    elif not access.permits_on_any(request, "WRITE", "topic"):
        access.require(request, "IDEMPOTENT_WRITE", "cluster", CLUSTER_RESOURCE_NAME)
