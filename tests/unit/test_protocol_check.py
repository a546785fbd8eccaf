"""The Delta protocol allow-list, case by case (FORMAT.md §6)."""

from collections import namedtuple

import pytest

from storage_layout.errors import UnsupportedTableFeatures
from storage_layout.protocol_check import check_protocol

Protocol = namedtuple(
    "Protocol", "min_reader_version min_writer_version writer_features reader_features"
)


@pytest.mark.parametrize(
    "protocol",
    [
        Protocol(1, 2, None, None),
        Protocol(1, 4, None, None),
        Protocol(3, 7, ["timestampNtz", "appendOnly"], ["timestampNtz"]),
        Protocol(1, 7, ["changeDataFeed", "checkConstraints"], None),
    ],
)
def test_allowed_protocols(protocol):
    """Protocols deltalake can append to and read with pyarrow pass."""
    check_protocol(protocol, "t")


@pytest.mark.parametrize(
    ("protocol", "fragment"),
    [
        (Protocol(2, 5, None, None), "reader version 2"),
        (Protocol(1, 6, None, None), "writer version 6"),
        (Protocol(3, 7, ["deletionVectors"], ["deletionVectors"]), "deletionVectors"),
        (Protocol(1, 7, ["inCommitTimestamp"], None), "inCommitTimestamp"),
        (Protocol(1, 7, ["rowTracking", "domainMetadata"], None), "rowTracking"),
        (Protocol(3, 7, ["v2Checkpoint"], ["v2Checkpoint"]), "v2Checkpoint"),
    ],
)
def test_refused_protocols(protocol, fragment):
    """Features deltalake cannot append to or read are refused with their names."""
    with pytest.raises(UnsupportedTableFeatures, match=fragment):
        check_protocol(protocol, "t")
