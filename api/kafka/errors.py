"""Errors as Kafka error codes, derived from the name each error class carries once (`code`,
Kafka's name for it: storage_layout/errors.py, api/core/errors.py, api/security/errors.py,
api/kafka/codec.py). An error whose name is not Kafka's is UNKNOWN_SERVER_ERROR, or
NOT_LEADER_OR_FOLLOWER when it says it is retriable (clients then refresh their metadata and
retry, as after a leader change). Authorization failures name the resource type's code."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from api.security.errors import AuthorizationFailed

log = logging.getLogger("lakelog.kafka")


AUTHORIZATION_CODES = {
    "topic": ErrorCode.topic_authorization_failed,
    "group": ErrorCode.group_authorization_failed,
    "cluster": ErrorCode.cluster_authorization_failed,
    "transactional_id": ErrorCode.transactional_id_authorization_failed,
}


def error_code(error: BaseException) -> ErrorCode:
    if isinstance(error, AuthorizationFailed) and error.resource_type in AUTHORIZATION_CODES:
        return AUTHORIZATION_CODES[error.resource_type]
    code = kafka_code_of(type(error))
    if code is not None:
        return code
    if getattr(error, "retriable", False):
        return ErrorCode.not_leader_or_follower
    log.warning("unexpected %s answered UNKNOWN_SERVER_ERROR: %s", type(error).__name__, error)
    return ErrorCode.unknown_server_error


def kafka_code_of(error_type: type[BaseException]) -> ErrorCode | None:
    """The Kafka code an error class names (its `code`), None if it names none of Kafka's."""
    name = getattr(error_type, "code", None)
    if not isinstance(name, str):
        return None
    return ErrorCode.__members__.get(name.lower())


def error_message(error: BaseException) -> str:
    """The error's own words, as Kafka's messages are (the code already names its kind)."""
    return (str(error) or type(error).__name__)[:1000]
