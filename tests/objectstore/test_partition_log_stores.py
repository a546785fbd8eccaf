"""The partition log's own tests (tests/storage/test_delta_log.py) run again with the table on
S3 (moto), on Azure Blob (Azurite) and on a local disk committing by exclusive create (the FUSE
path): one contract, every store. Only the tests that do not look at local files are taken."""

from __future__ import annotations

import pytest

from storage_layout import store
from storage_layout.log import DeltaPartitionLog
from tests.storage.test_delta_log import (  # noqa: F401 - collected here with this table_uri
    test_bytes_max_limits_but_returns_at_least_one_record,
    test_catch_up_sees_another_writers_commit_once,
    test_compaction_leaves_short_runs_alone,
    test_headers_timestamps_and_log_append_time,
    test_high_watermark_comes_from_the_txn_version,
    test_log_start_offset_follows_deleted_segments,
    test_offset_for_timestamp_skips_files_by_their_max_timestamp,
    test_offset_for_timestamp_with_out_of_order_create_times,
    test_offsets_are_dense_from_zero_and_read_back,
    test_reads_from_files_and_tail_agree,
    test_segments_roll_by_age,
    test_segments_roll_by_bytes_with_base_offset_values,
    test_small_files_are_compacted_in_offset_order,
    test_two_writers_on_one_stale_snapshot_only_one_commits,
)
from tests.storage.test_log_commit import (  # noqa: F401
    test_a_statistics_rewrite_of_live_files_is_not_stepped_over,
)


@pytest.fixture(params=["s3", "azure", "local-exclusive-create"])
def table_uri(request, tmp_path) -> str:
    if request.param == "local-exclusive-create":
        store.configure({store.LOCAL_COMMIT_OPTION: "exclusive-create"})
        request.addfinalizer(lambda: store.configure({}))
        root = str(tmp_path)
    else:
        root = request.getfixturevalue(f"{request.param}_root")
    uri = f"{root}/topics/t/0"
    DeltaPartitionLog.create(uri)
    return uri


def test_a_bulk_delete_deletes_every_file_past_a_missing_one(table_uri):
    """A missing file in a bulk delete does not keep the others (Settling deletes files a
    crashed pass may have deleted already)."""
    table = store.open_store(table_uri)
    names = [f"segment=0/part-{index}.parquet" for index in range(5)]
    for name in names:
        table.put_new(name, b"data")
    table.delete_many(["segment=0/missing.parquet", *names])
    assert [name for name in names if table.exists(name)] == []
