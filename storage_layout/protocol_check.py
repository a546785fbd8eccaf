"""The Delta protocol allow-list: tables lakelog can both append to and read (FORMAT.md §6).

deltalake 1.6.6 cannot append to tables with inCommitTimestamp, rowTracking/domainMetadata,
clustering, identity columns, type widening, vacuumProtocolCheck or checkpointProtection, and its
pyarrow reads fail with deletion vectors, v2 checkpoints or column mapping. Such a table is
refused on load, loudly, instead of failing later in the middle of a produce.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storage_layout.errors import UnsupportedTableFeatures

ALLOWED_READER_FEATURES = frozenset({"timestampNtz"})
ALLOWED_WRITER_FEATURES = frozenset(
    {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "timestampNtz"}
)
# Legacy writer versions: 2 invariants/appendOnly, 3 check constraints, 4 CDF + generated
# columns. 5 (column mapping) and 6 (identity) are refused; 7 lists its features explicitly.
ALLOWED_LEGACY_WRITER_VERSIONS = frozenset({1, 2, 3, 4})


@dataclass(frozen=True, slots=True)
class ProtocolVersions:
    """A table's protocol action, with delta-rs's attribute names (check_protocol takes
    either)."""

    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...] | None = None
    writer_features: tuple[str, ...] | None = None

    @classmethod
    def of(cls, action: Mapping[str, Any]) -> ProtocolVersions:
        """From a Delta `protocol` action as the log stores it."""
        readers, writers = action.get("readerFeatures"), action.get("writerFeatures")
        return cls(
            int(action.get("minReaderVersion", 1)),
            int(action.get("minWriterVersion", 2)),
            None if readers is None else tuple(readers),
            None if writers is None else tuple(writers),
        )


def check_protocol(protocol, table_uri: str) -> None:
    """Raise UnsupportedTableFeatures unless the table's protocol is on the allow-list."""
    problems = _reader_problems(protocol) + _writer_problems(protocol)
    if problems:
        raise UnsupportedTableFeatures(
            f"Table {table_uri} uses Delta features lakelog cannot safely append to or read: "
            f"{'; '.join(problems)}. Do not enable deletion vectors, column mapping, row "
            f"tracking, clustering, identity columns, type widening or in-commit timestamps on "
            f"lakelog tables."
        )


def _reader_problems(protocol) -> list[str]:
    version = protocol.min_reader_version
    if version == 1:
        return []
    if version == 3:
        extra = set(protocol.reader_features or ()) - ALLOWED_READER_FEATURES
        return [f"reader features {sorted(extra)}"] if extra else []
    return [f"reader version {version}"]


def _writer_problems(protocol) -> list[str]:
    version = protocol.min_writer_version
    if version in ALLOWED_LEGACY_WRITER_VERSIONS:
        return []
    if version == 7:
        extra = set(protocol.writer_features or ()) - ALLOWED_WRITER_FEATURES
        return [f"writer features {sorted(extra)}"] if extra else []
    return [f"writer version {version}"]
