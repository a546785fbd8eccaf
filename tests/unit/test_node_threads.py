"""How many storage threads a node runs by default, by what its root is: a local disk's work is
Python (two threads, more only hand the GIL over), a mount that commits by exclusive create
(FUSE, Unity Catalog Volumes) and an object store mostly wait on round trips."""

from __future__ import annotations

import pytest

from api.node import LOCAL_IO_THREADS, MOUNT_IO_THREADS, OBJECT_STORE_IO_THREADS, io_threads
from conf.settings import Settings
from storage_layout import store


@pytest.fixture
def storage_options():
    yield store.configure
    store.configure({})


def test_a_local_disk_runs_two_threads(tmp_path, storage_options):
    storage_options({})
    assert io_threads(Settings(data_dir=str(tmp_path / "root"))) == LOCAL_IO_THREADS == 2


def test_a_mount_that_commits_by_exclusive_create_runs_more(tmp_path, storage_options):
    storage_options({store.LOCAL_COMMIT_OPTION: "exclusive-create"})
    assert io_threads(Settings(data_dir=str(tmp_path / "root"))) == MOUNT_IO_THREADS > 2


def test_an_object_store_runs_the_most_and_a_setting_wins(tmp_path, storage_options):
    storage_options({})
    assert io_threads(Settings(data_dir="s3://bucket/root")) == OBJECT_STORE_IO_THREADS
    assert io_threads(Settings(data_dir=str(tmp_path), io_threads=5)) == 5
