"""How lakelog's loggers write: one line per event with stable fields, as text (default) or
JSON (`LAKELOG_LOG_FORMAT=json`, `lakelog serve --log-format json`), each with the id of the
request being served when there is one (api/core/request_context.py)."""

from __future__ import annotations

import json
import logging
import time

from api.core.request_context import current_request_id

TEXT = "%(asctime)s %(levelname)s %(name)s%(request_suffix)s: %(message)s"
FORMATS = ("text", "json")


class RequestIdFilter(logging.Filter):
    """Adds `request_id` (None outside requests) and the text format's suffix to records."""

    def filter(self, record: logging.LogRecord) -> bool:
        request_id = current_request_id()
        record.request_id = request_id
        record.request_suffix = f" [{request_id}]" if request_id else ""
        return True


class JsonFormatter(logging.Formatter):
    """{"ts", "level", "logger", "message", "request_id", "node_id"} (+ "error" with a trace)."""

    def __init__(self, node_id: int | None = None) -> None:
        super().__init__()
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        seconds = time.gmtime(record.created)
        line = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", seconds) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
            "node_id": self.node_id,
        }
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, separators=(",", ":"))


def configure(level: str, log_format: str, node_id: int | None = None) -> None:
    """lakelog's loggers on stderr at `level`, in `log_format` ("text" or "json")."""
    import sys

    if log_format not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, not {log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(
        JsonFormatter(node_id) if log_format == "json" else logging.Formatter(TEXT)
    )
    logger = logging.getLogger("lakelog")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
