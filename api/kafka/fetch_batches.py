"""A fetch's records as RecordBatch v2 bytes. One batch per run of records that share a
timestamp type, a codec and, for a transaction's records, a producer (the transactional
attribute and producer id let read_committed clients skip aborted transactions); each
transaction marker is a control batch of its own, uncompressed, as Kafka writes them
(FORMAT.md §14).

The codec is the topic's `compression.type`: `producer` (Kafka's default) compresses each run
as its records' producer did (the `compression` column, FORMAT.md §18; records produced over
HTTP, or uncompressed, go uncompressed), a codec compresses every batch with it, and
`uncompressed` (or `none`) none."""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c

from api.kafka.codec import (
    BATCH_HEADER,
    CODECS,
    CONTROL_BIT,
    CRC_FROM,
    MAGIC,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    EncodedBody,
    compress,
    encode_body,
    encode_control_record,
)
from storage_layout.leader_epochs import LeaderEpochs
from storage_layout.schema import COMPRESSION_COLUMN

NO_EPOCH = -1
PRODUCER, UNCOMPRESSED = "producer", ("uncompressed", "none")


@dataclass(frozen=True, slots=True)
class _Run:
    """Rows [start, stop) that go in one batch, and what its header says of them."""

    start: int
    stop: int
    log_append_time: bool
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH
    transactional: bool = False
    control: int | None = None  # a marker's type: the run is that one control record
    codec: int = 0  # Kafka's codec id of the batch (0: uncompressed)
    leader_epoch: int = NO_EPOCH  # the epoch whose leader wrote these records (-1: unknown)

    @property
    def attributes(self) -> int:
        attributes = self.codec | (TIMESTAMP_TYPE_BIT if self.log_append_time else 0)
        if self.transactional:
            attributes |= TRANSACTIONAL_BIT
        if self.control is not None:
            attributes |= CONTROL_BIT
        return attributes


def encode_records(
    records: pa.Table, compression_type: str = PRODUCER, epochs: LeaderEpochs | None = None
) -> bytes:
    """The records of a fetch (Arrow columns offset, timestamp, timestamp_type, key, value,
    headers, and optionally producer_id, producer_epoch, transactional, control and
    compression), in batches compressed as the topic's `compression_type` says, each saying
    which leader epoch wrote it (`epochs`; None: unknown)."""
    if not records.num_rows:
        return b""
    batches = []
    runs = _runs(records, _codecs(records, compression_type))
    if epochs is not None and epochs.entries:
        runs = _epoch_runs(runs, records.column("offset"), epochs)
    for run in runs:
        if run.control is not None:
            body = encode_control_record(records, run.start, run.control)
        else:
            body = _compressed(encode_body(records, run.start, run.stop), run.codec)
        batches.append(_frame(body, run))
    return b"".join(batches)


def _codecs(records: pa.Table, compression_type: str) -> pa.Array | int:
    """Each record's codec id: one for all (an int), or per record (the producer's)."""
    if compression_type in UNCOMPRESSED:
        return 0
    if compression_type != PRODUCER:
        return CODECS.index(compression_type)
    if COMPRESSION_COLUMN not in records.column_names:
        return 0
    column = records.column(COMPRESSION_COLUMN)
    if column.null_count == len(column):  # none came compressed: no compute call (~50 us)
        return 0
    column = pc.fill_null(column, 0)
    bounds = pc.min_max(column)
    if bounds["min"] == bounds["max"]:  # the usual case: found without a Python list
        return bounds["min"].as_py() or 0
    return column.combine_chunks()


def _compressed(encoded: EncodedBody, codec: int) -> EncodedBody:
    if not codec:
        return encoded
    return dataclasses.replace(encoded, body=compress(codec, encoded.body))


def _runs(records: pa.Table, codecs: pa.Array | int) -> Iterator[_Run]:
    if isinstance(codecs, int):
        for run in _uniform_runs(records):
            yield run if run.control is not None else dataclasses.replace(run, codec=codecs)
        return
    values = codecs.to_pylist()
    for run in _uniform_runs(records):
        if run.control is not None:
            yield run
            continue
        start = run.start
        for index in range(run.start + 1, run.stop + 1):
            if index == run.stop or values[index] != values[start]:
                yield dataclasses.replace(run, start=start, stop=index, codec=values[start])
                start = index


def _epoch_runs(
    runs: Iterator[_Run], offsets: pa.ChunkedArray, epochs: LeaderEpochs
) -> Iterator[_Run]:
    """Runs cut where a leader epoch starts, each with its epoch (a batch has one)."""
    first, last = offsets[0].as_py(), offsets[-1].as_py()  # ascending
    starts = [start for _epoch, start in epochs.entries if first < start <= last]
    if not starts:  # the usual fetch: one leader wrote it all, no per-record work
        epoch = epochs.epoch_of(first)
        for run in runs:
            yield dataclasses.replace(run, leader_epoch=epoch)
        return
    values = offsets.to_pylist()
    for run in runs:
        first, last = values[run.start], values[run.stop - 1]
        cuts = [bisect.bisect_left(values, s) for s in starts if first < s <= last]
        bounds = [run.start, *cuts, run.stop]
        for start, stop in itertools.pairwise(bounds):
            epoch = epochs.epoch_of(values[start])
            yield dataclasses.replace(run, start=start, stop=stop, leader_epoch=epoch)


def _uniform_runs(records: pa.Table) -> Iterator[_Run]:
    """Runs of one timestamp type and (for transactions) one producer, codecs aside."""
    types = records.column("timestamp_type")
    if not _has_transactions(records):
        yield from _timestamp_type_runs(types)
        return
    keys = list(
        zip(
            types.to_pylist(),
            records.column("transactional").to_pylist(),
            records.column("producer_id").to_pylist(),
            records.column("producer_epoch").to_pylist(),
            records.column("control").to_pylist(),
            strict=True,
        )
    )
    start = 0
    for index in range(1, len(keys) + 1):
        if index < len(keys) and _batch_key(keys[index]) == _batch_key(keys[start]):
            continue
        yield _run(start, index, keys[start])
        start = index


def _batch_key(key: tuple) -> tuple:
    timestamp_type, transactional, producer_id, epoch, control = key
    if control is not None:
        return key + (object(),)  # never equal: a marker is a batch of its own
    if not transactional:
        return (timestamp_type,)  # plain records batch together whoever produced them
    return timestamp_type, producer_id, epoch


def _run(start: int, stop: int, key: tuple) -> _Run:
    timestamp_type, transactional, producer_id, epoch, control = key
    if not transactional:
        return _Run(start, stop, bool(timestamp_type))
    return _Run(start, stop, bool(timestamp_type), producer_id, epoch, True, control)


def _has_transactions(records: pa.Table) -> bool:
    if "transactional" not in records.column_names:
        return False
    return records.column("transactional").null_count != records.num_rows


def _timestamp_type_runs(types: pa.ChunkedArray) -> Iterator[_Run]:
    bounds = pc.min_max(types)
    if bounds["min"] == bounds["max"]:  # one run: the usual case, found without a Python list
        yield _Run(0, len(types), bool(bounds["min"].as_py()))
        return
    values = types.to_pylist()
    start = 0
    for index in range(1, len(values) + 1):
        if index == len(values) or values[index] != values[start]:
            yield _Run(start, index, bool(values[start]))
            start = index


def _frame(encoded: EncodedBody, run: _Run) -> bytes:
    """A batch around an encoded records section: header, lengths, CRC. A compacted table's
    offsets have gaps: lastOffsetDelta then spans more than the record count."""
    header = BATCH_HEADER.pack(
        run.leader_epoch,
        MAGIC,
        0,  # CRC, filled in below
        run.attributes,
        encoded.last_offset - encoded.base_offset,
        encoded.base_timestamp_ms,
        encoded.max_timestamp_ms,
        run.producer_id,
        run.producer_epoch,
        NO_SEQUENCE,
        run.stop - run.start,
    )
    batch = bytearray(struct.pack(">qi", encoded.base_offset, len(header) + len(encoded.body)))
    batch += header
    batch += encoded.body
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[CRC_FROM:]))
    return bytes(batch)
