"""The store contract (storage_layout/store), run against every kind of store: a local disk
with hard links, a local disk committing by exclusive create (the FUSE path), and a real S3
endpoint (moto) and a real Azure Blob endpoint (Azurite), both with conditional PUTs.

GCS is not here: no emulator installable from a package registry enforces `ifGenerationMatch=0`
on the XML API that object_store uses (gcp-storage-emulator overwrites and sends no ETag;
fake-gcs-server answers plain PUTs 400 "invalid uploadType"). The GCS store is the same code
as S3 and Azure (object_store's `PutMode::Create`)."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from storage_layout import store
from storage_layout.store import Store, StoreNotFound, open_store
from storage_layout.store.local import ExclusiveCreateStore, LocalStore


@pytest.fixture(params=["local", "local-exclusive-create", "s3", "azure"])
def any_store(request, tmp_path) -> Store:
    if request.param == "local":
        return LocalStore(str(tmp_path))
    if request.param == "local-exclusive-create":
        return ExclusiveCreateStore(str(tmp_path))
    return open_store(request.getfixturevalue(f"{request.param}_root"))


def test_put_if_absent_creates_once(any_store):
    assert any_store.put_if_absent("log/00000000000000000007.json", b'{"a":1}\n')
    assert not any_store.put_if_absent("log/00000000000000000007.json", b'{"b":2}\n')
    assert any_store.get("log/00000000000000000007.json") == b'{"a":1}\n'
    assert [o.name for o in any_store.list("log")] == ["00000000000000000007.json"]


def test_put_if_absent_recognises_its_own_payload(any_store):
    """A create retried after a lost answer finds its own bytes: that counts as created."""
    assert any_store.put_if_absent("x.json", b"same")
    assert any_store.put_if_absent("x.json", b"same")
    assert not any_store.put_if_absent("x.json", b"other")


def test_racing_writers_of_one_version_have_one_winner(any_store):
    """Eight threads create the same name with different payloads: exactly one succeeds and
    the object holds that one's payload."""
    results: dict[int, bool] = {}
    barrier = threading.Barrier(8)

    def race(index: int) -> None:
        barrier.wait()
        results[index] = any_store.put_if_absent("race.json", f"writer {index}".encode())

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [i for i, won in results.items() if won]
    assert len(winners) == 1
    assert any_store.get("race.json") == f"writer {winners[0]}".encode()


def test_put_replaces_and_delete_forgets(any_store):
    any_store.put("nodes/1.json", b"one")
    any_store.put("nodes/1.json", b"two")
    assert any_store.get("nodes/1.json") == b"two"
    assert any_store.exists("nodes/1.json")
    any_store.delete("nodes/1.json")
    any_store.delete("nodes/1.json")  # missing is fine
    assert any_store.get("nodes/1.json") is None
    assert not any_store.exists("nodes/1.json")


def test_put_new_writes_a_fresh_name_in_a_new_directory(any_store):
    any_store.put_new("segment=3/part-1.parquet", b"data")
    assert any_store.get("segment=3/part-1.parquet") == b"data"
    assert [o.name for o in any_store.list("segment=3")] == ["part-1.parquet"]
    assert any_store.list_temporaries("segment=3") == []


def test_put_new_on_a_local_disk_writes_in_place_and_never_over_a_file(tmp_path):
    """No temporary and no rename (a data file's name is fresh): and so never over an
    existing file, which a name collision would otherwise silently replace."""
    local = LocalStore(str(tmp_path))
    local.put_new("segment=0/part-1.parquet", b"first")
    with pytest.raises(FileExistsError):
        local.put_new("segment=0/part-1.parquet", b"second")
    assert local.get("segment=0/part-1.parquet") == b"first"
    assert sorted(p.name for p in (tmp_path / "segment=0").iterdir()) == ["part-1.parquet"]


def test_list_is_one_level_sorted_and_empty_when_missing(any_store):
    for name in ("b", "a", "sub/c"):
        any_store.put(f"dir/{name}", name.encode())
    listed = any_store.list("dir")
    assert [o.name for o in listed] == ["a", "b"]
    assert all(o.size_bytes == 1 and o.modified_ms > 0 for o in listed)
    assert any_store.list("nothing-here") == []


def test_prefixed_listing_holds_exactly_the_names_with_the_prefix(any_store):
    for name in ("g1~a", "g1~b", "g1", "g10~a", "g0~z", "g2~a", "sub/g1~c"):
        any_store.put(name if "/" in name else f"dir/{name}", b"x")
    assert [o.name for o in any_store.list_prefixed("g1~", "dir")] == ["g1~a", "g1~b"]
    assert [o.name for o in any_store.list_prefixed("g1", "dir")] == ["g1", "g10~a", "g1~a", "g1~b"]
    assert any_store.list_prefixed("g3", "dir") == []
    assert any_store.list_prefixed("g1", "nothing-here") == []


def test_child_stores_share_the_root(any_store):
    child = any_store.child("topics/t/0")
    child.put("_delta_log/a", b"x")
    assert any_store.get("topics/t/0/_delta_log/a") == b"x"
    any_store.child("topics").delete_tree("t")
    assert any_store.get("topics/t/0/_delta_log/a") is None


def test_parquet_round_trip(any_store):
    table = pa.table({"offset": pa.array([1, 2, 3], pa.int64())})
    size = store.write_parquet(any_store, "seg=0/part.parquet", table)
    assert size == any_store.list("seg=0")[0].size_bytes
    assert store.read_parquet(any_store, "seg=0/part.parquet", ["offset"]).equals(table)
    with pytest.raises(FileNotFoundError):
        any_store.open_input("seg=0/missing.parquet")


def test_a_missing_bucket_is_named(s3_server):
    missing = open_store("s3://no-such-bucket-here/lakelog")
    with pytest.raises(StoreNotFound, match="no-such-bucket-here"):
        missing.put("x", b"y")


def test_local_roots_without_hard_links_use_exclusive_creates(tmp_path):
    store.configure({store.LOCAL_COMMIT_OPTION: "exclusive-create"})
    try:
        assert isinstance(open_store(str(tmp_path)), ExclusiveCreateStore)
    finally:
        store.configure({})
    assert type(open_store(str(tmp_path))) is LocalStore  # this disk hard-links


def test_an_unknown_local_commit_mode_is_refused():
    with pytest.raises(ValueError, match="lakelog.local_commit"):
        store.configure({store.LOCAL_COMMIT_OPTION: "rename"})
