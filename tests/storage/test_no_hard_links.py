"""A storage root on a file system without hard links (FUSE mounts such as Databricks'
`/Volumes`) serves every table: partitions and each `_meta` table commit through the store's
put-if-absent, which falls back to exclusive creates there (FORMAT.md §13).

The file system is made to refuse hard links for real: a process whose `link()`/`linkat()`
(libc, so Python and delta-rs's Rust alike) fail with EPERM, as on such a mount. Before the
`_meta` tables committed through the store, their delta-rs commits failed there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SHIM = r"""
#include <errno.h>
int link(const char *from, const char *to) { errno = EPERM; return -1; }
int linkat(int a, const char *from, int b, const char *to, int flags) {
    errno = EPERM; return -1;
}
"""

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    root = sys.argv[1]
    from storage_layout.store import open_store
    from storage_layout.log import DeltaPartitionLog
    from storage_layout.log.leadership import Leadership
    from storage_layout.meta.acls import AclBinding, AclStore
    from storage_layout.meta.catalog import TopicCatalog
    from storage_layout.meta.consumer_offsets import ConsumerOffsets, OffsetCommit
    from storage_layout.meta.principals import PrincipalStore
    from storage_layout.meta.producers import ProducerIdAllocator
    from storage_layout.paths import partition_table_uri
    from storage_layout.records import NewRecord

    out = {}
    try:
        os.link(os.path.join(root, "probe"), os.path.join(root, "probe-link"))
        out["link"] = "allowed"
    except OSError as error:
        out["link"] = error.strerror
    out["store"] = open_store(root).kind

    catalog = TopicCatalog(root)
    for i in range(40):  # past META_FILES_MAX: a bin-pack of the catalog
        catalog.create_topic(f"t{i}", 1)
    topic = catalog.topic("t0")
    log = DeltaPartitionLog.open(partition_table_uri(root, "t0", 0))
    log.commit_leadership(0, expected=None, hold=True)
    log.append([NewRecord(b"k", b"v")], config=topic.config)
    out["records"] = log.read(from_offset=0, records_max=10, bytes_max=1 << 20).records.num_rows

    offsets = ConsumerOffsets(root)
    held = offsets.take_group("g", 1, expected=None)
    for i in range(110):  # past a checkpoint (every 100 versions)
        offsets.commit("g", held, [OffsetCommit("t0", 0, i)], generation=-1, member_id=None)
    out["committed"] = offsets.load("g")
    out["committed"] = [c.offset for c in out["committed"].values()]
    out["dropped"] = offsets.keep_latest()
    out["coordinator"] = str(ConsumerOffsets(root).group_coordinator("g"))

    producers = ProducerIdAllocator(root)
    out["producer_ids"] = [producers.init_producer().producer_id for _ in range(3)]
    out["epochs"] = [producers.init_producer("tx").producer_epoch for _ in range(2)]

    principals = PrincipalStore(root)
    principals.add_principal("alice")
    out["principals"] = PrincipalStore(root).principals()
    acls = AclStore(root)
    acls.add(AclBinding.parse(principal="alice", operation="read", permission="allow",
                              resource_type="topic", resource_name="t0"))
    out["acls"] = len(AclStore(root).bindings())
    out["topics"] = len(TopicCatalog(root).topics())
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def no_link_library(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to build the link-refusing shim (Debian: apt install gcc)")
    build = tmp_path_factory.mktemp("shim")
    source = build / "nolink.c"
    source.write_text(SHIM)
    library = build / "nolink.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True, timeout=60
    )
    return library


def test_every_table_works_on_a_file_system_without_hard_links(tmp_path, no_link_library):
    root = tmp_path / "root"
    root.mkdir()
    (root / "probe").write_bytes(b"x")
    env = {**os.environ, "LD_PRELOAD": str(no_link_library)}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(root)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 0, result.stderr[-4000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["link"] == "Operation not permitted"  # the shim works: no hard links here
    assert out["store"] == "local-exclusive-create"
    assert out["records"] == 1
    assert out["committed"] == [109]
    assert out["coordinator"] == "Leadership(epoch=0, node_id=1)"
    assert out["producer_ids"] == [0, 1, 2]
    assert out["epochs"] == [0, 1]
    assert out["principals"] == ["User:alice"]
    assert out["acls"] == 1
    assert out["topics"] == 40
    checkpoints = list((root / "_meta" / "consumer_offsets" / "_delta_log").glob("*.checkpoint*"))
    assert checkpoints, "the offsets table was not checkpointed"
