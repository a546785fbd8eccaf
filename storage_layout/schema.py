"""The Arrow schema of a partition table, shared by the gateway, the CLI and Spark code.

Column order is part of the format (see FORMAT.md). `segment` is the Delta partition column and
holds the base offset of the segment a record belongs to.
"""

from __future__ import annotations

import pyarrow as pa

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
# Spark and Delta name list children `element`; pyarrow's default `item` would not round-trip.
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))

TIMESTAMP_TYPE_CREATE_TIME = 0
TIMESTAMP_TYPE_LOG_APPEND_TIME = 1

# The `control` column of a transaction marker (Kafka's ControlRecordType; FORMAT.md §14).
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
TRANSACTION_COLUMNS = ("transactional", "control")
# The codec of the Kafka batch a record came in (Kafka's attribute bits: 1 gzip, 2 snappy, 3 lz4,
# 4 zstd; null: uncompressed, or not produced over Kafka's protocol). FORMAT.md §18.
COMPRESSION_COLUMN = "compression"
# Columns added after the first tables were written: older files lack them (read as null), and
# a table's schema gains them with the first append that needs them.
ADDED_COLUMNS = (*TRANSACTION_COLUMNS, COMPRESSION_COLUMN)

PARTITION_COLUMN = "segment"
LOG_APP_ID = "log"  # txn app id whose version is the last assigned offset (the offset CAS)
# txn app id whose version names the partition's leader: epoch * NODE_IDS + node_id.
LEADER_APP_ID = "leader"
# txn app id whose version is the log start offset set by retention (FORMAT.md §3): key
# compaction may empty the first segment without moving the log start.
LOG_START_APP_ID = "log_start"
# txn app ids `leader_epoch:<epoch>`, each with the epoch's start offset as version, written by
# the commit that takes the leadership (storage_layout/leader_epochs.py).
LEADER_EPOCH_APP_ID_PREFIX = "leader_epoch:"
NODE_IDS = 1 << 16

PARTITION_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", TIMESTAMP_TYPE, nullable=False),
        pa.field("timestamp_type", pa.int8(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
        pa.field("producer_id", pa.int64()),
        pa.field("producer_epoch", pa.int16()),
        pa.field("sequence", pa.int32()),
        pa.field("transactional", pa.bool_()),
        pa.field("control", pa.int8()),
        pa.field(COMPRESSION_COLUMN, pa.int8()),
        pa.field(PARTITION_COLUMN, pa.int64(), nullable=False),
    ]
)

# What a data file holds: the partition column lives in the directory name, not the file.
FILE_SCHEMA = pa.schema([f for f in PARTITION_SCHEMA if f.name != PARTITION_COLUMN])

# Records to append, before they get offsets: a producer's CreateTime (null: the append time),
# key, value, headers (storage_layout.records.RecordColumns).
NEW_RECORDS_SCHEMA = pa.schema(
    [
        pa.field("timestamp_ms", pa.int64()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
    ]
)

# The columns a fetch returns (producer state stays internal).
RECORD_COLUMNS = ("offset", "timestamp", "timestamp_type", "key", "value", "headers")
# ...and those a Kafka fetch also needs to frame transactional batches and markers, and to
# compress batches as their producers did.
TRANSACTIONAL_RECORD_COLUMNS = (
    *RECORD_COLUMNS,
    "producer_id",
    "producer_epoch",
    "transactional",
    "control",
    COMPRESSION_COLUMN,
)
