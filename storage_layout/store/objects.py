"""Object stores (S3, Azure Blob/ADLS, GCS) through obstore (Rust's object_store, the client
delta-rs uses too, so both read the same variables and agree on what "create" means).

put_if_absent is a conditional PUT: S3 `If-None-Match: *`, Azure `If-None-Match: *`, GCS
`ifGenerationMatch=0`. The store answers 412 when the object exists; object_store reports it
as AlreadyExistsError. Every other write is a whole-object PUT (readers see old or new).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import obstore
import pyarrow as pa
from obstore import exceptions as obstore_errors
from obstore.store import from_url

from storage_layout.store.base import (
    Store,
    StoreAccessDenied,
    StoredObject,
    StoreError,
    StoreNotFound,
    holds,
)
from storage_layout.store.stats import ERROR, OK, counted, record

# Requests are retried inside the client (5xx, throttling such as S3's 503 SlowDown, dropped
# connections) with exponential backoff, but only for this long: a produce waits on it, and
# past it the client's own retry (a retriable error) is the better answer.
RETRY_TIMEOUT_MS = 10_000
RETRIES_MAX = 4
REQUEST_TIMEOUT_MS = 15_000
CONNECT_TIMEOUT_MS = 5_000

_SCHEMES = {
    "s3": "s3",
    "s3a": "s3",
    "az": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "adl": "azure",
    "azure": "azure",
    "gs": "gcs",
}


def store_kind(uri: str) -> str | None:
    """ "s3", "azure" or "gcs" for an object-store URI, None for anything else."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    return _SCHEMES.get(scheme)


class ObjectStore(Store):
    """A prefix of a bucket or container. One client per bucket is shared by every prefix."""

    def __init__(self, uri: str, client: Any, prefix: str) -> None:
        self.uri = uri.rstrip("/")
        self.kind = store_kind(uri) or "object"
        self._client = client
        self._prefix = prefix.strip("/")

    def child(self, relative: str) -> Store:
        relative = relative.strip("/")
        return ObjectStore(f"{self.uri}/{relative}", self._client, self._key(relative))

    def _key(self, path: str) -> str:
        path = path.strip("/")
        if not self._prefix:
            return path
        return f"{self._prefix}/{path}" if path else self._prefix

    @counted("put_if_absent")
    def put_if_absent(self, path: str, data: bytes) -> bool:
        try:
            obstore.put(self._client, self._key(path), data, mode="create", use_multipart=False)
        except obstore_errors.AlreadyExistsError:
            return holds(self, path, data)
        except Exception as error:  # noqa: BLE001 - one translation for every client error
            return self._resolve_unknown_create(path, data, _translate(error, self.uri, path))
        return True

    def _resolve_unknown_create(self, path: str, data: bytes, failure: StoreError) -> bool:
        """A create that failed after its retries (5xx, throttling, timeouts) may still have
        been applied: read the object to learn the outcome, never write again. Ours: created;
        another's: lost the race; absent: nothing was written, the caller may retry."""
        if isinstance(failure, StoreAccessDenied | StoreNotFound):
            raise failure
        try:
            found = self.get(path)
        except StoreError:
            raise failure from None  # still unknown: the caller answers "retry"
        if found is None:
            raise failure
        return found == data

    @counted("put")
    def put(self, path: str, data: bytes) -> None:
        try:
            obstore.put(self._client, self._key(path), data, use_multipart=False)
        except Exception as error:  # noqa: BLE001
            raise _translate(error, self.uri, path) from error

    @counted("get")
    def get(self, path: str) -> bytes | None:
        try:
            return obstore.get(self._client, self._key(path)).bytes().to_bytes()
        except FileNotFoundError:
            return None
        except obstore_errors.NotFoundError:
            return None
        except Exception as error:  # noqa: BLE001
            raise _translate(error, self.uri, path) from error

    @counted("head")
    def exists(self, path: str) -> bool:
        try:
            obstore.head(self._client, self._key(path))
        except (FileNotFoundError, obstore_errors.NotFoundError):
            return False
        except Exception as error:  # noqa: BLE001
            raise _translate(error, self.uri, path) from error
        return True

    @counted("list")
    def list(self, directory: str = "") -> list[StoredObject]:
        key = self._key(directory)
        try:
            result = obstore.list_with_delimiter(self._client, key + "/" if key else None)
        except (FileNotFoundError, obstore_errors.NotFoundError):
            return []
        except Exception as error:  # noqa: BLE001
            raise _translate(error, self.uri, directory) from error
        found = [
            StoredObject(
                meta["path"].rsplit("/", 1)[-1],
                meta["size"],
                int(meta["last_modified"].timestamp() * 1000),
            )
            for meta in result["objects"]
        ]
        return sorted(found, key=lambda item: item.name)

    def list_after(self, start_after: str, directory: str = "") -> list[StoredObject]:
        prefix = self._key(directory) + "/" if self._key(directory) else ""
        return [
            item
            for item in self._stream(directory, offset=prefix + start_after)
            if item.name > start_after
        ]

    def list_below(self, bound: str, directory: str = "") -> list[StoredObject]:
        found = []
        for item in self._stream(directory):
            if item.name >= bound:
                break  # listed in name order: the rest is above too
            found.append(item)
        return found

    def list_prefixed(self, prefix: str, directory: str = "") -> list[StoredObject]:
        key = self._key(directory)
        found = []
        # The listing starts after its offset: just below the prefix, so a name equal to it
        # is listed too.
        offset = (key + "/" if key else "") + _just_below(prefix)
        for item in self._stream(directory, offset=offset):
            if item.name < prefix:
                continue
            if not item.name.startswith(prefix):
                break  # listed in name order: the rest is past the prefix too
            found.append(item)
        return found

    def _stream(self, directory: str, offset: str | None = None):
        """The objects directly in `directory` in name order, a page at a time."""
        key = self._key(directory)
        prefix = key + "/" if key else ""
        try:
            for chunk in obstore.list(self._client, prefix or None, offset=offset, chunk_size=1000):
                record(self.kind, "list", OK)  # a page: one request
                for meta in chunk:
                    name = meta["path"][len(prefix) :]
                    if "/" not in name:
                        yield StoredObject(
                            name, meta["size"], int(meta["last_modified"].timestamp() * 1000)
                        )
        except (FileNotFoundError, obstore_errors.NotFoundError):
            return
        except Exception as error:  # noqa: BLE001
            record(self.kind, "list", ERROR)
            raise _translate(error, self.uri, directory) from error

    @counted("delete")
    def delete(self, path: str) -> None:
        try:
            obstore.delete(self._client, self._key(path))
        except (FileNotFoundError, obstore_errors.NotFoundError):
            pass
        except Exception as error:  # noqa: BLE001
            raise _translate(error, self.uri, path) from error

    def delete_many(self, paths: list[str]) -> None:
        keys = [self._key(path) for path in paths]
        for start in range(0, len(keys), 1000):  # S3's DeleteObjects takes 1,000 a request
            try:
                obstore.delete(self._client, keys[start : start + 1000])
                record(self.kind, "delete", OK)
            except (FileNotFoundError, obstore_errors.NotFoundError):
                # GCS and Azure answer a missing one with an error that ends the bulk delete
                # there: the rest of the batch is deleted one by one (delete skips missing ones).
                for path in paths[start : start + 1000]:
                    self.delete(path)
            except Exception as error:  # noqa: BLE001
                record(self.kind, "delete", ERROR)
                raise _translate(error, self.uri, paths[start]) from error

    def delete_tree(self, directory: str = "") -> None:
        key = self._key(directory)
        try:
            for chunk in obstore.list(self._client, key + "/" if key else None, chunk_size=500):
                record(self.kind, "list", OK)
                obstore.delete(self._client, [meta["path"] for meta in chunk])
                record(self.kind, "delete", OK)
        except (FileNotFoundError, obstore_errors.NotFoundError):
            pass
        except Exception as error:  # noqa: BLE001
            record(self.kind, "delete", ERROR)
            raise _translate(error, self.uri, directory) from error

    def open_input(self, path: str) -> pa.NativeFile:
        data = self.get(path)
        if data is None:
            raise FileNotFoundError(f"{self.uri}/{path}")
        return pa.BufferReader(data)


def _just_below(name: str) -> str:
    """A string below `name` and above every name below it (the empty string stays)."""
    if not name:
        return ""
    return name[:-1] + chr(ord(name[-1]) - 1) + "\U0010ffff"


def open_client(uri: str, options: dict[str, str]) -> Any:
    """An obstore client for the bucket or container of `uri` (credentials and endpoints from
    the cloud's standard environment variables, then `options`)."""
    prefix = _CONFIG_PREFIXES.get(store_kind(uri) or "", "")
    config = {k: v for k, v in options.items() if k.lower().startswith(prefix)}
    return from_url(
        bucket_url(uri),
        config=config or None,
        client_options=_client_options(uri, options),
        retry_config={
            "max_retries": RETRIES_MAX,
            "retry_timeout": timedelta(milliseconds=RETRY_TIMEOUT_MS),
        },
    )


def _client_options(uri: str, options: dict[str, str]) -> dict[str, Any]:
    """Timeouts, plus `allow_http` as the variables say: client options given here replace
    the ones object_store reads from the environment, and only that one matters here."""
    kind = store_kind(uri)
    names = _ALLOW_HTTP_VARIABLES.get(kind, ())
    wanted = [os.environ.get(name, "") for name in names] + [options.get("allow_http", "")]
    return {
        "timeout": timedelta(milliseconds=REQUEST_TIMEOUT_MS),
        "connect_timeout": timedelta(milliseconds=CONNECT_TIMEOUT_MS),
        "allow_http": any(value.lower() in ("1", "true", "yes") for value in wanted),
    }


# obstore takes only the store's own keys as config; client keys such as `allow_http` (which
# delta-rs takes beside them) go in the client options.
_CONFIG_PREFIXES = {"s3": "aws_", "azure": "azure_", "gcs": "google_"}
_ALLOW_HTTP_VARIABLES = {
    "s3": ("AWS_ALLOW_HTTP",),
    "azure": ("AZURE_ALLOW_HTTP", "AZURE_STORAGE_USE_EMULATOR"),
    "gcs": ("GOOGLE_ALLOW_HTTP",),
}


def bucket_url(uri: str) -> str:
    """`scheme://bucket` (or Azure's `abfss://container@account...`) of a URI."""
    scheme, rest = uri.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


def key_prefix(uri: str) -> str:
    """The part of a URI after its bucket."""
    rest = uri.split("://", 1)[1]
    return rest.split("/", 1)[1] if "/" in rest else ""


def _translate(error: Exception, uri: str, path: str) -> StoreError:
    where = f"{uri}/{path}" if path else uri
    text = str(error).split("\n\nDebug source:", 1)[0]
    if isinstance(
        error, obstore_errors.PermissionDeniedError | obstore_errors.UnauthenticatedError
    ):
        return StoreAccessDenied(f"{where}: the store refused the credentials: {text}")
    if "169.254.169.254" in text:  # no credentials given: the client asked the VM's metadata
        return StoreAccessDenied(f"{where}: no credentials found in the environment: {text}")
    if "builder error" in text:  # reqwest refuses http:// unless allowed
        return StoreError(f"{where}: the client refused the endpoint (plain http?): {text}")
    if "NoSuchBucket" in text or "ContainerNotFound" in text:
        return StoreNotFound(f"{where}: the bucket or container does not exist: {text}")
    return StoreError(f"{where}: {text}")
