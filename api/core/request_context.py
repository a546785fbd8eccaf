"""The id of the request being served, carried to log lines and to the requests this node
sends on its behalf (forwards to a leader or coordinator), so one id follows a request across
nodes. Protocol-neutral: front-ends set it, the core and the logs read it."""

from __future__ import annotations

import os
import re
from contextvars import ContextVar

REQUEST_ID_HEADER = "x-request-id"
_VALID = re.compile(r"[A-Za-z0-9._:-]{1,64}")

_current: ContextVar[str | None] = ContextVar("lakelog_request_id", default=None)


def current_request_id() -> str | None:
    return _current.get()


def begin_request(given: str | None) -> str:
    """The request's id (the client's, if it is a short token; else a new one), now current."""
    if given is not None and _VALID.fullmatch(given):
        request_id = given
    else:  # 64 random bits: unique enough to follow one request (4x cheaper than a uuid4)
        request_id = os.urandom(8).hex()
    _current.set(request_id)
    return request_id
