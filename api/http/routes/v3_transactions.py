"""Transactions over HTTP (lakelog extension of the v3 API), with Kafka's semantics.

    POST /v3/clusters/{c}/transactions/{id}/begin        -> producer_id, producer_epoch
    POST /v3/clusters/{c}/topics/{t}/records             records with "transactional_id",
                                                         producer_id, producer_epoch, sequence
    POST /v3/clusters/{c}/transactions/{id}/consumer-groups/{g}/offsets
    POST /v3/clusters/{c}/transactions/{id}/commit  (or /abort)
    GET  /v3/clusters/{c}/transactions/{id}

`begin` is Kafka's InitProducerId with the transactional id: it fences every older producer
of the id (its open transaction is aborted) and returns a new epoch; sequences start at 0 in
each partition. Records produced with the id join its open transaction (their partitions are
added to it by the gateway, as KIP-890's second protocol does), and are seen by read_committed
readers only once it commits. Offsets sent to a group within the transaction are committed
with it (and OffsetFetch reports them unstable until then). Commit and abort answer with the
next transaction's producer id and epoch (the epoch is bumped at each end, as KIP-890 does,
fencing late retries of the ended one); sequences start again at 0 with it.

Every node serves these routes: the transactional id's coordinator is found for the client.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Request
from pydantic import BaseModel, Field

from api.core.broker import Broker
from api.http import access
from api.http.deps import BrokerDep
from api.http.forwarding import served_by_coordinator
from api.http.routes.v3_topics import check_cluster
from storage_layout.meta.transaction_state import PendingOffset

router = APIRouter(prefix="/v3", tags=["v3 transactions (lakelog)"])

TRANSACTION = "/clusters/{cluster_id}/transactions/{transactional_id}"
TIMEOUT_MS_DEFAULT = 60_000  # Kafka's transaction.timeout.ms default
# Kafka's limit on ids (249 characters, as topic names): checked on every route's path.
TransactionalId = Annotated[str, Path(min_length=1, max_length=249)]


class Begin(BaseModel):
    transaction_timeout_ms: int = Field(
        default=TIMEOUT_MS_DEFAULT,
        gt=0,
        le=900_000,
        description="An open transaction older than this is aborted by the coordinator.",
    )


class Producer(BaseModel):
    producer_id: int = Field(ge=0, le=2**63 - 1)
    producer_epoch: int = Field(ge=0, le=2**15 - 1)


class TransactionOffset(BaseModel):
    topic_name: str = Field(min_length=1, max_length=249)
    partition_id: int = Field(ge=0, le=2**31 - 1)
    offset: int = Field(ge=0, le=2**63 - 1, description="The next offset to consume (Kafka's)")
    metadata: str | None = Field(default=None, max_length=4096)


class TransactionOffsets(Producer):
    offsets: list[TransactionOffset] = Field(min_length=1, max_length=10_000)
    member_id: str | None = Field(
        default=None,
        description="The consumer's member id and generation, as Kafka's "
        "sendOffsetsToTransaction sends them (checked like a commit); absent for a group "
        "without members.",
    )
    generation_id: int = Field(default=-1, ge=-(2**31), le=2**31 - 1)


class TransactionalProducer(BaseModel):
    kind: str = "KafkaTransactionalProducer"
    transactional_id: str
    producer_id: int
    producer_epoch: int


@router.post(
    TRANSACTION + "/begin",
    summary="Begin: a new epoch for a transactional id (fences older producers of it)",
    response_model=TransactionalProducer,
)
async def begin(
    cluster_id: str,
    transactional_id: TransactionalId,
    request: Request,
    broker: BrokerDep,
    body: Annotated[Begin | None, Body()] = None,
) -> TransactionalProducer:
    check_cluster(cluster_id, broker.settings)
    timeout_ms = (body or Begin()).transaction_timeout_ms
    identity = await begin_transactions(request, broker, transactional_id, timeout_ms)
    return TransactionalProducer(
        transactional_id=transactional_id,
        producer_id=identity.producer_id,
        producer_epoch=identity.producer_epoch,
    )


async def begin_transactions(request: Request, broker: Broker, transactional_id: str, timeout_ms):
    """InitProducerId with the id, at its coordinator; the producer id is bound to the caller."""
    identity = await broker.transaction_requests.init_producer(transactional_id, timeout_ms)
    await access.bind_producer(request, identity.producer_id)
    return identity


@router.post(
    TRANSACTION + "/consumer-groups/{group}/offsets",
    summary="Send a consumer group's offsets within the transaction",
    status_code=204,
)
@served_by_coordinator
async def send_offsets(
    cluster_id: str,
    transactional_id: TransactionalId,
    group: str,
    body: TransactionOffsets,
    request: Request,
    broker: BrokerDep,
) -> None:
    check_cluster(cluster_id, broker.settings)
    access.require_topics(request, "READ", (o.topic_name for o in body.offsets))
    await access.check_producer(request, body.producer_id)
    producer = (transactional_id, body.producer_id, body.producer_epoch)
    if body.member_id:
        await broker.groups.check_committer(group, body.member_id, body.generation_id)
    await broker.transaction_requests.add_group(*producer, group)
    offsets = [
        PendingOffset(group, o.topic_name, o.partition_id, o.offset, o.metadata)
        for o in body.offsets
    ]
    await broker.add_transaction_offsets(*producer, offsets)


_END_DESCRIPTION = (
    "Returns the producer id and epoch of the next transaction: the epoch is bumped at every "
    "commit and abort (as KIP-890 does), which fences the ended transaction's epoch in every "
    "partition it wrote to, so a late retry of one of its records is refused (409 40906) "
    "instead of starting a transaction nobody ends. Sequences start again at 0. A retry of the "
    "same commit or abort is answered again."
)


@router.post(
    f"{TRANSACTION}/commit",
    summary="Commit the open transaction",
    description=_END_DESCRIPTION,
    response_model=TransactionalProducer,
)
async def commit(
    cluster_id: str,
    transactional_id: TransactionalId,
    body: Producer,
    request: Request,
    broker: BrokerDep,
) -> TransactionalProducer:
    return await _end(cluster_id, transactional_id, body, request, broker, commit=True)


@router.post(
    f"{TRANSACTION}/abort",
    summary="Abort the open transaction",
    description=_END_DESCRIPTION,
    response_model=TransactionalProducer,
)
async def abort(
    cluster_id: str,
    transactional_id: TransactionalId,
    body: Producer,
    request: Request,
    broker: BrokerDep,
) -> TransactionalProducer:
    return await _end(cluster_id, transactional_id, body, request, broker, commit=False)


async def _end(
    cluster_id: str,
    transactional_id: str,
    body: Producer,
    request: Request,
    broker: Broker,
    *,
    commit: bool,
) -> TransactionalProducer:
    check_cluster(cluster_id, broker.settings)
    await access.check_producer(request, body.producer_id)
    identity = await broker.transaction_requests.end(
        transactional_id, body.producer_id, body.producer_epoch, commit
    )
    if identity.producer_id != body.producer_id:  # the epochs ran out: a new id, theirs
        await access.bind_producer(request, identity.producer_id)
    return TransactionalProducer(
        transactional_id=transactional_id,
        producer_id=identity.producer_id,
        producer_epoch=identity.producer_epoch,
    )


@router.get(TRANSACTION, summary="A transactional id's state (Kafka's DescribeTransactions)")
async def describe(
    cluster_id: str, transactional_id: TransactionalId, request: Request, broker: BrokerDep
) -> dict:
    check_cluster(cluster_id, broker.settings)
    return await broker.transaction_requests.describe(transactional_id)
