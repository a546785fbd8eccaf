"""Share group errors (KIP-932), named after Kafka's error codes. They are BrokerErrors, so the
one map in api/http/errors.py turns them into HTTP statuses and stable error codes."""

from __future__ import annotations

from api.core.errors import BrokerError


class ShareError(BrokerError):
    code = "SHARE_ERROR"


class InvalidRecordState(ShareError):
    """An acknowledgement of a record the member does not hold (never acquired, settled
    already, held by another member, or its lock expired): nothing changed."""

    code = "INVALID_RECORD_STATE"


class UnknownDeliveryId(ShareError):
    """An HTTP acknowledgement whose delivery id this API never handed out (lakelog's own)."""

    code = "UNKNOWN_DELIVERY_ID"
