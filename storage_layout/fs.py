"""File-system access for the few operations Delta itself does not cover."""

from __future__ import annotations

import shutil

import pyarrow.fs as pafs
from deltalake.fs import DeltaStorageHandler

from storage_layout import paths


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """A pyarrow file system for `uri` and the base path to prefix relative paths with.

    Local paths use pyarrow's own file system; object stores go through deltalake's storage
    handler so the same credentials and URI schemes work as for the Delta tables.
    """
    if paths.is_local(uri):
        return pafs.LocalFileSystem(), paths.normalize_root(uri)
    return pafs.PyFileSystem(DeltaStorageHandler(uri)), ""


def remove_tree(uri: str) -> None:
    """Delete a directory tree (a deleted topic's tables). Missing is fine."""
    if paths.is_local(uri):
        shutil.rmtree(paths.normalize_root(uri), ignore_errors=True)
        return
    fs, _ = filesystem(uri)
    try:
        fs.delete_dir("")
    except FileNotFoundError:
        pass
