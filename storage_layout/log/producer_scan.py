"""Rebuilding idempotent producers' state from a partition's data files (FORMAT.md §10): the
producer columns are committed with the records, so the table itself is the state."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from storage_layout.log.files import read_columns
from storage_layout.log.snapshot import DataFile
from storage_layout.producer_state import CommittedSpan, ProducerStates
from storage_layout.store import Store

# Producer state is rebuilt on open from at most this many newest data files (FORMAT.md §10).
PRODUCER_STATE_FILES_MAX = 100
# A producer continuing a sequence the rebuilt state does not know is looked up in up to this
# many older data files, once per writer (older_producer_states).
PRODUCER_LOOKUP_FILES_MAX = 1_000
_PRODUCER_COLUMNS = ("offset", "timestamp", "producer_id", "producer_epoch", "sequence")


def producer_states(store: Store, files: Sequence[DataFile]) -> ProducerStates:
    """Producers' last committed spans, rebuilt from the newest PRODUCER_STATE_FILES_MAX of
    `files` (offset order; files whose statistics show no producer id are skipped unread).

    A span is a run of one producer epoch's records with consecutive sequences at
    consecutive offsets; a retried batch inside it is recognised as a duplicate. A producer
    whose records are all older than the bound is unknown (UNKNOWN_PRODUCER_ID unless it
    starts a new epoch at sequence 0).
    """
    newest = files[-PRODUCER_STATE_FILES_MAX:]
    tables = [_producer_rows(store, f) for f in newest if f.has_producer_ids is not False]
    return _states([table for table in tables if table.num_rows])


def older_producer_states(
    store: Store,
    files: Sequence[DataFile],
    producer_ids: Collection[int],
    *,
    files_max: int = PRODUCER_LOOKUP_FILES_MAX,
) -> ProducerStates:
    """The state of `producer_ids` from the files older than those producer_states reads,
    newest first, until each is found or `files_max` files were read.

    For a producer that paused while others wrote more than PRODUCER_STATE_FILES_MAX commits
    and then met a new leader: Kafka keeps its state, so lakelog looks further back.
    """
    wanted = set(producer_ids)
    older = files[:-PRODUCER_STATE_FILES_MAX][-files_max:]
    tables = []
    for data_file in reversed(older):
        if not wanted:
            break
        if data_file.has_producer_ids is False:
            continue
        table = _producer_rows(store, data_file)
        ids = table.column("producer_id")
        table = table.filter(pc.is_in(ids, pa.array(sorted(wanted), type=ids.type)))
        if table.num_rows:
            tables.append(table)
            wanted -= set(table.column("producer_id").unique().to_pylist())
    return _states(tables)


def _states(tables: list[pa.Table]) -> ProducerStates:
    if not tables:
        return ProducerStates()
    table = pa.concat_tables(tables).sort_by("offset")
    # Transaction markers carry a producer id but no sequence: not producer batches, but
    # their epoch fences older ones (a coordinator bumps the epoch when it aborts).
    is_batch = pc.is_valid(table.column("sequence"))
    rows = table.filter(is_batch).to_pydict()
    state = ProducerStates.from_spans(_spans_from_rows(rows))
    markers = table.filter(pc.invert(is_batch)).to_pydict()
    for producer_id, epoch in zip(markers["producer_id"], markers["producer_epoch"], strict=True):
        state = state.fenced_to(producer_id, epoch)
    return state


def _producer_rows(store: Store, data_file: DataFile) -> pa.Table:
    table = read_columns(store, data_file, list(_PRODUCER_COLUMNS))
    return table.filter(pc.is_valid(table.column("producer_id")))


def _spans_from_rows(rows: dict[str, list]) -> list[tuple[int, CommittedSpan]]:
    """(producer_id, span) pairs in offset order from rows sorted by offset."""
    open_runs: dict[int, list[int]] = {}  # producer -> [epoch, base_seq, count, base_off, ms]
    closed: list[tuple[int, list[int]]] = []
    for offset, micros, producer, epoch, sequence in zip(
        *(rows[name] for name in _PRODUCER_COLUMNS), strict=True
    ):
        run = open_runs.get(producer)
        if run and run[0] == epoch and sequence == run[1] + run[2] and offset == run[3] + run[2]:
            run[2] += 1
            continue
        if run:
            closed.append((producer, run))
        open_runs[producer] = [epoch, sequence, 1, offset, _micros_to_ms(micros)]
    closed.extend(open_runs.items())
    closed.sort(key=lambda item: item[1][3])
    return [(producer, CommittedSpan(*run)) for producer, run in closed]


def _micros_to_ms(value) -> int:
    if isinstance(value, int):
        return value // 1000
    return int(value.timestamp() * 1000)
