"""AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn: the transactional
producer's requests, translated to the core's TransactionCoordinator (api/core/transactions.py).
InitProducerId with a transactional id is in handlers/cluster.py.

Both transaction protocols are served. ApiVersions finalizes `transaction.version` 2 (KIP-890),
so Kafka 4 clients use the second: Produce v12 adds a partition itself (handlers/produce.py),
TxnOffsetCommit v5 adds its group itself (no AddOffsetsToTxn), and EndTxn v5 bumps the epoch
at every end and answers the next transaction's producer id and epoch, which fences the ended
one everywhere. Older clients keep the first (KIP-98): AddPartitionsToTxn and AddOffsetsToTxn
before they write, one epoch for every transaction.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from api.kafka.connection import Connection
from api.kafka.errors import error_code
from storage_layout.meta.transaction_state import PendingOffset
from storage_layout.records import TopicPartition

TRANSACTIONS_V2_OFFSETS = 5  # TxnOffsetCommit adds the group to the transaction itself
TRANSACTIONS_V2_END = 5  # EndTxn bumps the epoch and answers the next one


async def add_partitions_to_txn(connection: Connection, request, version: int) -> dict:
    transactional_id = request.v3_and_below_transactional_id
    topics = request.v3_and_below_topics
    wanted = [TopicPartition(t.name, p) for t in topics for p in t.partitions]
    try:
        connection.check("WRITE", "transactional_id", transactional_id)
        for topic in topics:
            connection.check("WRITE", "topic", topic.name)
            info = await connection.broker.topics.get(topic.name)
            for partition in topic.partitions:
                info.check_partition(partition)
        await connection.broker.transactions.add_partitions(
            transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            wanted,
        )
        code = ErrorCode.none
    except Exception as error:
        code = error_code(error)
    results = [
        {
            "name": topic.name,
            "results_by_partition": [
                {"partition_index": p, "partition_error_code": code} for p in topic.partitions
            ],
        }
        for topic in topics
    ]
    return {"throttle_time": 0, "results_by_topic_v3_and_below": results}


async def add_offsets_to_txn(connection: Connection, request, version: int) -> dict:
    try:
        connection.check("WRITE", "transactional_id", request.transactional_id)
        connection.check("READ", "group", request.group_id)
        await connection.broker.transactions.add_group(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.group_id,
        )
    except Exception as error:
        return {"throttle_time": 0, "error_code": error_code(error)}
    return {"throttle_time": 0, "error_code": ErrorCode.none}


async def txn_offset_commit(connection: Connection, request, version: int) -> dict:
    """Sent to the group's coordinator: the member is checked there, then the offsets go to
    the transaction's state, to be committed with it."""
    offsets = [
        PendingOffset(
            request.group_id,
            topic.name,
            p.partition_index,
            p.committed_offset,
            p.committed_metadata,
            getattr(p, "committed_leader_epoch", -1),  # TxnOffsetCommit v2+
        )
        for topic in request.topics
        for p in topic.partitions
    ]
    try:
        connection.check("WRITE", "transactional_id", request.transactional_id)
        connection.check("READ", "group", request.group_id)
        for topic in request.topics:
            connection.check("READ", "topic", topic.name)
        member_id = getattr(request, "member_id", "") or None
        generation = getattr(request, "generation_id", -1)
        if member_id is not None:
            await connection.broker.groups.check_committer(request.group_id, member_id, generation)
        if version >= TRANSACTIONS_V2_OFFSETS:  # the group joins the transaction implicitly
            await connection.broker.transaction_requests.add_group(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.group_id,
            )
        await connection.broker.add_transaction_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch, offsets
        )
        code = ErrorCode.none
    except Exception as error:
        code = error_code(error)
    topics = [
        {
            "name": topic.name,
            "partitions": [
                {"partition_index": p.partition_index, "error_code": code} for p in topic.partitions
            ],
        }
        for topic in request.topics
    ]
    return {"throttle_time": 0, "topics": topics}


async def end_txn(connection: Connection, request, version: int) -> dict:
    bump_epoch = version >= TRANSACTIONS_V2_END
    try:
        connection.check("WRITE", "transactional_id", request.transactional_id)
        identity = await connection.broker.transactions.end(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.committed,
            bump_epoch=bump_epoch,
        )
    except Exception as error:
        return {"throttle_time": 0, "error_code": error_code(error)}
    answer = {"throttle_time": 0, "error_code": ErrorCode.none}
    if bump_epoch:  # v5: the next transaction's producer id and epoch
        answer |= {"producer_id": identity.producer_id, "producer_epoch": identity.producer_epoch}
    return answer
