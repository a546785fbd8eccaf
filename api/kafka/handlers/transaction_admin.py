"""ListTransactions, DescribeTransactions and DescribeProducers: what kafka-transactions and
the AdminClient ask of the transaction coordinators (each node lists the transactional ids it
coordinates) and of the partitions' leaders (the producers a partition remembers)."""

from __future__ import annotations

import datetime
import time
from collections import defaultdict

from kio.schema.errors import ErrorCode

from api.kafka.connection import Connection
from api.kafka.errors import error_code, error_message
from storage_layout.meta.transaction_state import TxnState, TxnStatus

KAFKA_STATES = {status.value for status in TxnStatus} | {"Dead", "PrepareEpochFence"}
NOT_STARTED = -1  # Kafka's transaction start time when none is open


async def list_transactions(connection: Connection, request, version: int) -> dict:
    wanted_states = set(request.state_filters)
    wanted_producers = set(request.producer_id_filters)
    running_longer_ms = getattr(request, "duration_filter", -1)  # v1+
    now_ms = int(time.time() * 1000)
    listed = []
    for state in await connection.broker.transactions.listed():
        if wanted_states and state.status.value not in wanted_states:
            continue
        if wanted_producers and state.producer_id not in wanted_producers:
            continue
        if running_longer_ms >= 0 and now_ms - _start_ms(state) <= running_longer_ms:
            continue
        if not connection.permits("DESCRIBE", "transactional_id", state.transactional_id):
            continue
        listed.append(
            {
                "transactional_id": state.transactional_id,
                "producer_id": state.producer_id,
                "transaction_state": state.status.value,
            }
        )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "unknown_state_filters": sorted(wanted_states - KAFKA_STATES),
        "transaction_states": listed,
    }


async def describe_transactions(connection: Connection, request, version: int) -> dict:
    described = [await _described(connection, tid) for tid in request.transactional_ids]
    return {"throttle_time": 0, "transaction_states": described}


async def _described(connection: Connection, transactional_id: str) -> dict:
    answer = {
        "error_code": ErrorCode.none,
        "transactional_id": transactional_id,
        "transaction_state": "",
        "transaction_timeout": 0,
        "transaction_start_time": _utc(NOT_STARTED),
        "producer_id": -1,
        "producer_epoch": -1,
        "topics": [],
    }
    try:
        connection.check("DESCRIBE", "transactional_id", transactional_id)
        state = await connection.broker.transactions.describe(transactional_id)
    except Exception as error:
        return answer | {"error_code": error_code(error)}
    partitions = defaultdict(list)
    for tp in state.partitions:
        partitions[tp.topic].append(tp.partition)
    return answer | {
        "transaction_state": state.status.value,
        "transaction_timeout": state.timeout_ms,
        "transaction_start_time": _utc(_start_ms(state)),
        "producer_id": state.producer_id,
        "producer_epoch": state.producer_epoch,
        "topics": [{"topic": t, "partitions": sorted(p)} for t, p in sorted(partitions.items())],
    }


def _start_ms(state: TxnState) -> int:
    return state.started_ms if state.status == TxnStatus.ONGOING else NOT_STARTED


def _utc(milliseconds: int) -> datetime.datetime:
    """kio's timestamp field type (a tz-aware datetime) for Kafka's int64 milliseconds."""
    return datetime.datetime.fromtimestamp(milliseconds / 1000, datetime.UTC)


async def describe_producers(connection: Connection, request, version: int) -> dict:
    topics = []
    for topic in request.topics:
        answers = [
            await _producers(connection, topic.name, index) for index in topic.partition_indexes
        ]
        topics.append({"name": topic.name, "partitions": answers})
    return {"throttle_time": 0, "topics": topics}


async def _producers(connection: Connection, topic: str, partition: int) -> dict:
    answer = {"partition_index": partition, "error_code": ErrorCode.none, "error_message": None}
    try:
        connection.check("READ", "topic", topic)
        producers = await connection.broker.partitions.active_producers(topic, partition)
    except Exception as error:
        code, message = error_code(error), error_message(error)
        return answer | {"error_code": code, "error_message": message, "active_producers": []}
    active = [
        {
            "producer_id": p.producer_id,
            "producer_epoch": p.epoch,
            "last_sequence": p.last_sequence,
            "last_timestamp": p.last_append_time_ms,
            "coordinator_epoch": -1,
            "current_txn_start_offset": -1
            if p.transaction_start_offset is None
            else p.transaction_start_offset,
        }
        for p in producers
    ]
    return answer | {"active_producers": active}
