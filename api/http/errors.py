"""The one place where errors become HTTP: status + Confluent's `{"error_code", "message"}`.

Codes follow the Confluent REST Proxy (40401 unknown topic, 40402 unknown partition, 40002 bad
request, 413, 415, 422xx validation, 50003 retriable). lakelog-only codes keep the same shape:
41601 offset out of range; 40406 a record removed by compaction; 409xx idempotent-producer
rejections and consumer-group errors
(Kafka's error names: 40910 ILLEGAL_GENERATION, 40911 UNKNOWN_MEMBER_ID, 40912
REBALANCE_IN_PROGRESS, 40913 FENCED_INSTANCE_ID, ...). Security (`api/security/errors.py`):
40101 authentication failed (401 + WWW-Authenticate), 40301 not authorized (403), 42901 quota
exceeded (429 + Retry-After).
"""

from __future__ import annotations

import logging

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from api.core import metrics
from api.core.errors import (
    BrokerError,
    BrokerShuttingDown,
    ConcurrentTransactions,
    InvalidProducerIdMapping,
    InvalidProducerRequest,
    InvalidRequest,
    InvalidTransactionTimeout,
    InvalidTxnState,
    KeyRequired,
    RecordTooLarge,
    TransactionalIdNotFound,
    TransactionCoordinatorUnavailable,
)
from api.core.groups.errors import (
    ConsumerFormatMismatch,
    ConsumerInstanceExists,
    ConsumerInstanceNotFound,
    FencedInstanceId,
    GroupNotFound,
    GroupSubscribedToTopic,
    IllegalConsumerState,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidConsumerConfig,
    InvalidGroupRequest,
    NonEmptyGroup,
    NoOffsetForPartition,
    NotCoordinator,
    RebalanceInProgress,
    RecordNotFound,
    UnknownMemberId,
)
from api.core.internal_topics import InternalTopicAccess
from api.core.schemas.errors import (
    CompatibilityNotConfigured,
    IncompatibleSchema,
    InvalidCompatibilityLevel,
    InvalidMode,
    InvalidSubject,
    InvalidVersion,
    ModeNotConfigured,
    OperationNotPermitted,
    RecordSchemaInvalid,
    ReferenceExists,
    SchemaNotFound,
    SubjectNotFound,
    SubjectNotSoftDeleted,
    SubjectSoftDeleted,
    VersionNotFound,
    VersionNotSoftDeleted,
    VersionSoftDeleted,
)
from api.core.shares.errors import InvalidRecordState, UnknownDeliveryId
from api.security.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    QuotaExceeded,
    SecurityError,
)
from storage_layout.errors import (
    AppendConflict,
    CorruptPartition,
    DuplicateSequence,
    InvalidConfig,
    InvalidPartitions,
    InvalidSchema,
    InvalidTopic,
    OffsetOutOfRange,
    OutOfOrderSequence,
    PartitionNotFound,
    ProducerFenced,
    StorageError,
    StorageUnavailable,
    TopicExists,
    TopicNotFound,
    UnknownProducerId,
    UnsupportedTableFeatures,
)

log = logging.getLogger("lakelog.api")

JSON_TYPE = "application/json"

CLIENT_CLOSED_REQUEST = 499  # nginx's status for a request whose client left before the answer

# Error class -> (HTTP status, Confluent error_code). The first matching base class wins.
ERROR_STATUS: dict[type[Exception], tuple[int, int]] = {
    TopicNotFound: (404, 40401),
    PartitionNotFound: (404, 40402),
    TopicExists: (400, 40002),
    InvalidTopic: (400, 40002),
    InvalidConfig: (400, 40002),
    InvalidPartitions: (400, 40002),
    InvalidRequest: (400, 40002),
    OffsetOutOfRange: (416, 41601),
    RecordTooLarge: (422, 422),  # as Karapace: the request was fine, a record was not
    KeyRequired: (422, 42214),
    InvalidProducerRequest: (422, 42209),
    OutOfOrderSequence: (409, 40904),
    DuplicateSequence: (409, 40905),
    ProducerFenced: (409, 40906),
    UnknownProducerId: (409, 40907),
    ConsumerInstanceNotFound: (404, 40403),
    GroupNotFound: (404, 40405),
    RecordNotFound: (404, 40406),
    ConsumerFormatMismatch: (406, 40601),
    ConsumerInstanceExists: (409, 40902),
    IllegalConsumerState: (409, 40903),
    IllegalGeneration: (409, 40910),
    UnknownMemberId: (409, 40911),
    RebalanceInProgress: (409, 40912),
    FencedInstanceId: (409, 40913),
    InconsistentGroupProtocol: (409, 40914),
    NonEmptyGroup: (409, 40915),
    NoOffsetForPartition: (409, 40916),
    GroupSubscribedToTopic: (409, 40917),
    InvalidTxnState: (409, 40918),
    InvalidProducerIdMapping: (409, 40919),
    InvalidRecordState: (409, 40920),
    UnknownDeliveryId: (404, 40408),
    InternalTopicAccess: (400, 40002),
    TransactionalIdNotFound: (404, 40407),
    InvalidTransactionTimeout: (422, 42216),
    ConcurrentTransactions: (503, 50003),
    TransactionCoordinatorUnavailable: (503, 50003),
    InvalidConsumerConfig: (422, 42204),
    InvalidGroupRequest: (422, 42212),
    NotCoordinator: (503, 50003),
    AppendConflict: (503, 50003),
    StorageUnavailable: (503, 50003),
    BrokerShuttingDown: (503, 50003),
    CorruptPartition: (500, 50002),
    UnsupportedTableFeatures: (500, 50002),
    StorageError: (500, 50002),
    BrokerError: (500, 50002),
}
# The schema registry's own codes (Confluent Schema Registry's).
REGISTRY_STATUS: dict[type[Exception], tuple[int, int]] = {
    SubjectNotFound: (404, 40401),
    VersionNotFound: (404, 40402),
    SchemaNotFound: (404, 40403),
    SubjectSoftDeleted: (404, 40404),
    SubjectNotSoftDeleted: (404, 40405),
    VersionSoftDeleted: (404, 40406),
    VersionNotSoftDeleted: (404, 40407),
    CompatibilityNotConfigured: (404, 40408),
    ModeNotConfigured: (404, 40409),
    IncompatibleSchema: (409, 409),
    InvalidSchema: (422, 42201),
    InvalidVersion: (422, 42202),
    InvalidCompatibilityLevel: (422, 42203),
    InvalidMode: (422, 42204),
    OperationNotPermitted: (422, 42205),
    ReferenceExists: (422, 42206),
    InvalidSubject: (422, 42208),
    # a record refused by its topic's schema validation: the REST Proxy's "schema" code
    RecordSchemaInvalid: (422, 42205),
}
ERROR_STATUS = REGISTRY_STATUS | ERROR_STATUS
SECURITY_STATUS: dict[type[Exception], tuple[int, int]] = {
    AuthenticationFailed: (401, 40101),
    AuthorizationFailed: (403, 40301),
    QuotaExceeded: (429, 42901),
}
ERROR_STATUS |= SECURITY_STATUS
AUTH_CHALLENGE = 'Bearer realm="lakelog", Basic realm="lakelog"'

# v3 reports an unknown topic or partition as 40403 (UnknownTopicOrPartition), as Confluent does.
V3_OVERRIDES: dict[type[Exception], tuple[int, int]] = {
    TopicNotFound: (404, 40403),
    PartitionNotFound: (404, 40403),
    RecordTooLarge: (413, 413),
}


class ApiError(Exception):
    """An HTTP-level failure: bad content type, malformed body, oversized request."""

    def __init__(
        self, status: int, error_code: int, message: str, *, headers: dict | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message
        self.headers = headers or {}


def status_for(error: Exception, *, v3: bool = False) -> tuple[int, int]:
    """(HTTP status, error_code) of any error; unknown errors are 500/50002."""
    if isinstance(error, ApiError):
        return error.status, error.error_code
    for table in (V3_OVERRIDES, ERROR_STATUS) if v3 else (ERROR_STATUS,):
        for error_type, status in table.items():
            if isinstance(error, error_type):
                return _retriable_as_503(error, status)
    return _retriable_as_503(error, (500, 50002))


def _retriable_as_503(error: Exception, status: tuple[int, int]) -> tuple[int, int]:
    """An error that says it is retriable (NotLeader, a deposed leader's LeadershipConflict)
    is a 503/50003 even where its base class maps to 500: a produce answered 500 with a per-record
    50003 (chaos T2) told clients two things."""
    if status == (500, 50002) and getattr(error, "retriable", False):
        return 503, 50003
    return status


def error_body(error_code: int, message: str) -> dict:
    """Confluent's error body: of every error answer (handlers, the body limit, refused
    request heads) and of a v3 produce report's failed record. Counted by code."""
    count_error(error_code)
    return {"error_code": error_code, "message": message}


def count_error(error_code: int) -> None:
    """An error answered (`lakelog_http_errors`): per answer, and per failed record of a
    produce report."""
    metrics.HTTP_ERRORS.labels(str(error_code)).inc()


def error_response(error: Exception, *, v3: bool = False) -> Response:
    status, code = status_for(error, v3=v3)
    message = (
        str(error)
        if status < 500 or isinstance(error, StorageError | BrokerError)
        else ("Internal server error.")
    )
    return Response(
        orjson.dumps(error_body(code, message)),
        status,
        headers=_headers_of(error),
        media_type=JSON_TYPE,
    )


def _headers_of(error: Exception) -> dict[str, str] | None:
    if isinstance(error, ApiError):
        return error.headers
    if isinstance(error, AuthenticationFailed):
        return {"WWW-Authenticate": AUTH_CHALLENGE}
    if isinstance(error, QuotaExceeded):
        return {"Retry-After": str(error.retry_after_s)}
    return None


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves the gateway as Confluent's error body."""

    async def handle_known(request: Request, error: Exception) -> Response:
        return error_response(error, v3=request.url.path.startswith("/v3/"))

    async def handle_validation(request: Request, error: RequestValidationError) -> Response:
        return error_response(ApiError(422, 422, _describe_validation(error)))

    async def handle_http(request: Request, error: StarletteHTTPException) -> Response:
        message = str(error.detail) if error.detail else f"HTTP {error.status_code}"
        return error_response(ApiError(error.status_code, error.status_code, message))

    async def handle_disconnect(request: Request, error: ClientDisconnect) -> Response:
        # The caller went away mid-body (a node giving up a forward to a leader that stopped
        # renewing its lease, a client timing out): nothing was done, nobody reads the answer.
        log.debug("client left during %s %s", request.method, request.url.path)
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    async def handle_unexpected(request: Request, error: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(error)

    for error_type in (ApiError, StorageError, BrokerError, SecurityError):
        app.add_exception_handler(error_type, handle_known)
    app.add_exception_handler(RequestValidationError, handle_validation)
    app.add_exception_handler(StarletteHTTPException, handle_http)
    app.add_exception_handler(ClientDisconnect, handle_disconnect)
    app.add_exception_handler(Exception, handle_unexpected)


def _describe_validation(error: RequestValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(part) for part in item.get("loc", ()) if part != "body")
        parts.append(f"{where}: {item.get('msg', 'invalid')}")
    return "Invalid request: " + "; ".join(parts)


# Codes a v2 produce response reports per record as they are (others become 50002/50003):
# unknown topic or partition, idempotent-producer rejections, the topic's schema validation.
PER_RECORD_CODES = frozenset({40401, 40402, 40904, 40905, 40906, 40907, 42205})
