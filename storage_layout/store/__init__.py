"""Storage roots: `open_store(uri)` gives the `Store` for a local path or an object-store URI.

Credentials and endpoints come from each cloud's standard environment variables (read by
obstore and delta-rs alike); `configure(options)` adds explicit storage options for what has no
variable (object_store keys such as `aws_conditional_put`, plus lakelog's own `lakelog.*` keys),
once per process: the gateway, the CLI and the jobs call it from their settings, Spark executors
from the options shipped in their splits.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from storage_layout import paths
from storage_layout.store.base import (
    Store,
    StoreAccessDenied,
    StoredObject,
    StoreError,
    StoreNotFound,
)
from storage_layout.store.local import ExclusiveCreateStore, LocalStore, supports_hard_links
from storage_layout.store.objects import (
    ObjectStore,
    bucket_url,
    key_prefix,
    open_client,
    store_kind,
)
from storage_layout.store.parquet import read_parquet, write_parquet

__all__ = [
    "Store",
    "StoreAccessDenied",
    "StoreError",
    "StoreNotFound",
    "StoreUnusable",
    "StoredObject",
    "adopt",
    "check_root",
    "configure",
    "delta_storage_options",
    "open_store",
    "read_parquet",
    "storage_options",
    "write_parquet",
]

# How local roots make put_if_absent exclusive: "auto" probes for hard links once per root;
# "hard-link" or "exclusive-create" force one (tests run the FUSE path on a normal disk).
LOCAL_COMMIT_OPTION = "lakelog.local_commit"
LOCAL_COMMIT_MODES = ("auto", "hard-link", "exclusive-create")

_lock = threading.Lock()
_options: dict[str, str] = {}
_clients: dict[str, object] = {}
_hard_links: dict[int, bool] = {}  # by st_dev


def configure(options: Mapping[str, str] | None) -> None:
    """Set the process's explicit storage options (replacing earlier ones)."""
    options = dict(options or {})
    mode = options.get(LOCAL_COMMIT_OPTION, "auto")
    if mode not in LOCAL_COMMIT_MODES:
        raise ValueError(
            f"storage option {LOCAL_COMMIT_OPTION}={mode!r}: use one of {LOCAL_COMMIT_MODES}"
        )
    with _lock:
        _options.clear()
        _options.update({str(k): str(v) for k, v in options.items()})
        _clients.clear()


def adopt(options: Mapping[str, str] | None) -> None:
    """On a Spark executor: take the driver's explicit options (shipped with the task) unless
    this process has them already. Credentials from variables need nothing: executors have
    their own environment (or instance role)."""
    if options and storage_options() != dict(options):
        configure(options)


def storage_options() -> dict[str, str]:
    """Every explicit option (lakelog's own included), e.g. to ship to Spark executors."""
    with _lock:
        return dict(_options)


def delta_storage_options() -> dict[str, str] | None:
    """The options for delta-rs (object_store keys only), or None when there are none."""
    with _lock:
        options = {k: v for k, v in _options.items() if not k.startswith("lakelog.")}
    return options or None


def open_store(uri: str) -> Store:
    """The store rooted at `uri`: a local path (or file://) or an s3://, s3a://, abfss://,
    az://, gs:// URI. Object stores share one client per bucket."""
    uri = paths.normalize_root(uri)
    if paths.is_local(uri):
        return _local_store(uri)
    if store_kind(uri) is None:
        raise ValueError(
            f"{uri}: unsupported storage root; use a local path or an s3://, s3a://, "
            f"abfss://, az:// or gs:// URI"
        )
    bucket = bucket_url(uri)
    options = delta_storage_options() or {}  # the object_store keys, as delta-rs gets them
    with _lock:
        client = _clients.get(bucket)
        if client is None:
            client = _clients[bucket] = open_client(uri, options)
    return ObjectStore(uri, client, key_prefix(uri))


def _local_store(path: str) -> Store:
    with _lock:
        mode = _options.get(LOCAL_COMMIT_OPTION, "auto")
    if mode == "hard-link":
        return LocalStore(path)
    if mode == "exclusive-create":
        return ExclusiveCreateStore(path)
    return LocalStore(path) if _probe_hard_links(path) else ExclusiveCreateStore(path)


def _probe_hard_links(path: str) -> bool:
    """Whether the file system under `path` hard-links, probed once per device (a stat of
    the nearest existing directory tells which)."""
    device = os.stat(_existing_ancestor(path)).st_dev
    with _lock:
        known = _hard_links.get(device)
    if known is None:
        known = supports_hard_links(path)
        with _lock:
            _hard_links[device] = known
    return known


def _existing_ancestor(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


class StoreUnusable(StoreError):
    """The storage root cannot serve lakelog; the message names what to fix."""


_FIX_ACCESS = {
    "s3": "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the instance's role)",
    "azure": "check AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY (or a SAS token)",
    "gcs": "check GOOGLE_APPLICATION_CREDENTIALS / GOOGLE_SERVICE_ACCOUNT",
}
_FIX_REACH = {
    "s3": "check AWS_ENDPOINT_URL and AWS_REGION (and AWS_ALLOW_HTTP=true for a plain-http "
    "endpoint)",
    "azure": "check AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ENDPOINT (or "
    "AZURE_STORAGE_USE_EMULATOR=true for Azurite)",
    "gcs": "check GOOGLE_SERVICE_ACCOUNT and the network path to storage.googleapis.com",
}
_FIX_CREATE = {
    "s3": "the endpoint must answer If-None-Match: * with 412 (AWS S3 since 2024, MinIO, "
    "moto); leave AWS_CONDITIONAL_PUT unset or set it to etag",
    "azure": "the endpoint must honour If-None-Match: * on Put Blob",
    "gcs": "the endpoint must honour ifGenerationMatch=0",
}


def check_root(uri: str) -> Store:
    """Prove the root can serve lakelog before anything is written: reachable, credentials
    accepted, and put-if-absent enforced (two creates of one probe object: the second must
    be refused). Three requests on an object store; local disks are checked too (the FUSE
    path included).

    Raises:
        StoreUnusable: with what to fix, naming the variable or resource.
    """
    root = open_store(uri)
    kind = store_kind(root.uri) or "local"
    probe = f"_meta/store_check/{os.getpid()}-{threading.get_ident()}-{os.urandom(6).hex()}"
    try:
        created = root.put_if_absent(probe, b"first")
        refused = created and not root.put_if_absent(probe, b"second")
        root.delete(probe)
    except StoreNotFound as error:
        raise StoreUnusable(
            f"{root.uri}: the bucket or container does not exist ({error}); "
            f"create it, or fix the storage root"
        ) from error
    except StoreAccessDenied as error:
        raise StoreUnusable(
            f"{root.uri}: access denied ({error}); {_FIX_ACCESS.get(kind, 'check permissions')}"
        ) from error
    except OSError as error:
        raise StoreUnusable(
            f"{root.uri}: cannot write to the storage root ({error}); "
            f"{_FIX_REACH.get(kind, 'check that the directory is writable')}"
        ) from error
    if not refused:
        raise StoreUnusable(
            f"{root.uri}: the store does not enforce create-if-absent, which every commit "
            f"relies on; {_FIX_CREATE.get(kind, 'use a file system with hard links or O_EXCL')}"
        )
    return root
