"""Small `_meta` Delta tables (topic catalog, producer ids): opening and keeping them small."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from storage_layout.errors import StorageUnavailable
from storage_layout.store import delta_storage_options

# One file per change would make every full read of a _meta table slower; past this many
# files the table is compacted (dataChange=false, so it never conflicts with a change).
META_FILES_MAX = 32


def open_or_create(
    uri: str, schema: pa.Schema, configuration: dict[str, str] | None = None
) -> DeltaTable:
    """The table at `uri`, created empty with `schema` if absent. Of nodes creating it at
    once, the losers get a commit conflict (or a no-op) and load the winner's table.

    Raises:
        StorageUnavailable: it could not be read or created.
    """
    options = delta_storage_options()
    try:
        return DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        pass
    except (OSError, DeltaError) as error:
        raise StorageUnavailable(f"Cannot load {uri}: {error}") from error
    try:
        return DeltaTable.create(
            uri, schema, mode="ignore", configuration=configuration, storage_options=options
        )
    except CommitFailedError:
        pass
    except (OSError, DeltaError) as error:
        raise StorageUnavailable(f"Cannot create {uri}: {error}") from error
    try:
        return DeltaTable(uri, storage_options=options)
    except (OSError, DeltaError) as error:
        raise StorageUnavailable(f"Cannot load {uri}: {error}") from error


def maybe_bin_pack(dt: DeltaTable) -> None:
    """Compact the table once it holds more than META_FILES_MAX files."""
    try:
        if pa.table(dt.get_add_actions()).num_rows > META_FILES_MAX:
            dt.optimize.compact()
    except (OSError, DeltaError):
        pass  # an optimization only: the next change tries again
