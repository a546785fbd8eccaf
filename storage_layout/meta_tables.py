"""Small `_meta` Delta tables (topic catalog, producer ids): opening and keeping them small."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from storage_layout.errors import StorageUnavailable

# One file per change would make every full read of a _meta table slower; past this many
# files the table is compacted (dataChange=false, so it never conflicts with a change).
META_FILES_MAX = 32


def open_or_create(uri: str, schema: pa.Schema) -> DeltaTable:
    """The table at `uri`, created empty with `schema` if absent (safe if two nodes race)."""
    try:
        return DeltaTable(uri)
    except TableNotFoundError:
        pass
    try:
        return DeltaTable.create(uri, schema, mode="ignore")
    except (OSError, DeltaError) as error:
        raise StorageUnavailable(f"Cannot create {uri}: {error}") from error


def maybe_compact(dt: DeltaTable) -> None:
    """Compact the table once it holds more than META_FILES_MAX files."""
    try:
        if pa.table(dt.get_add_actions()).num_rows > META_FILES_MAX:
            dt.optimize.compact()
    except (OSError, DeltaError):
        pass  # an optimization only: the next change tries again
