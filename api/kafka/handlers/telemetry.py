"""GetTelemetrySubscriptions (KIP-714): Kafka 4 clients ask which of their metrics the cluster
wants pushed. lakelog collects none, so the answer is a subscription with no metrics, and
clients never push (PushTelemetry is not served)."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from api.kafka.connection import Connection

PUSH_INTERVAL_MS = 300_000  # Kafka's interval.ms default: how soon a client asks again
TELEMETRY_MAX_BYTES = 1_048_576  # Kafka's telemetry.max.bytes default


async def get_telemetry_subscriptions(connection: Connection, request, version: int) -> dict:
    instance_id = request.client_instance_id
    if instance_id is None or instance_id.int == 0:  # a new client: the broker names it
        instance_id = uuid.uuid4()
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "client_instance_id": instance_id,
        "subscription_id": 0,
        "accepted_compression_types": [],
        "push_interval": PUSH_INTERVAL_MS,
        "telemetry_max_bytes": TELEMETRY_MAX_BYTES,
        "delta_temporality": True,
        "requested_metrics": [],
    }
