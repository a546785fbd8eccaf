"""Typed columns of a partition table (FORMAT.md §17): the fields of keys and values that
carry a registered schema's id, stored beside the raw bytes in the same table.

Four optional columns, each pair added by a schema change when the first such key or value
arrives: `key_schema_id` (int), `key_fields` (struct), `value_schema_id`, `value_fields`. A
struct only ever widens: a new schema version's new fields are added (rows written before read
them as null). A field whose type in a new version differs from the table's keeps the table's
type, and the records of that version store null there (their raw bytes keep the value): a
table is never rewritten and never holds two types for one column.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

KEY_SCHEMA_ID, KEY_FIELDS = "key_schema_id", "key_fields"
VALUE_SCHEMA_ID, VALUE_FIELDS = "value_schema_id", "value_fields"
TYPED_COLUMNS = (KEY_SCHEMA_ID, KEY_FIELDS, VALUE_SCHEMA_ID, VALUE_FIELDS)
SCHEMA_ID_TYPE = pa.int32()


# Characters Delta (without column mapping) and Spark refuse in a column or field name.
_INVALID_NAME_CHARS = frozenset(" ,;{}()\n\t=")


def field_names(names: Iterable[str]) -> list[str]:
    """Delta-safe names for a struct's fields, in order: characters Delta refuses become `_`,
    and a name equal to an earlier one when case is ignored (Spark's default) gets `_2`,
    `_3`, ... (FORMAT.md §17)."""
    taken: set[str] = set()
    safe = []
    for name in names:
        base = "".join("_" if c in _INVALID_NAME_CHARS else c for c in name) or "_"
        candidate, n = base, 1
        while candidate.lower() in taken:
            n += 1
            candidate = f"{base}_{n}"
        taken.add(candidate.lower())
        safe.append(candidate)
    return safe


def id_column(fields_column: str) -> str:
    return KEY_SCHEMA_ID if fields_column == KEY_FIELDS else VALUE_SCHEMA_ID


@dataclass(frozen=True, slots=True)
class Merged:
    """A table's typed column type after taking in a new one, and what could not be."""

    type: pa.DataType
    conflicts: tuple[str, ...] = ()


def merge_types(table: pa.DataType | None, new: pa.DataType, path: str = "") -> Merged:
    """`table` widened to hold `new` too: struct fields are added, lists and maps merged by
    their items; a different type anywhere is a conflict and keeps `table`'s."""
    if table is None or table == new:
        return Merged(new if table is None else table)
    if pa.types.is_struct(table) and pa.types.is_struct(new):
        return _merge_structs(table, new, path)
    if pa.types.is_list(table) and pa.types.is_list(new):
        item = merge_types(table.value_type, new.value_type, f"{path}[]")
        return Merged(pa.list_(table.value_field.with_type(item.type)), item.conflicts)
    if pa.types.is_map(table) and pa.types.is_map(new) and table.key_type == new.key_type:
        item = merge_types(table.item_type, new.item_type, f"{path}{{}}")
        return Merged(
            pa.map_(table.key_field, table.item_field.with_type(item.type)), item.conflicts
        )
    return Merged(table, (f"{path or '<root>'}: {new} does not fit {table}",))


def _merge_structs(table: pa.StructType, new: pa.StructType, path: str) -> Merged:
    fields, conflicts = [], []
    new_names = {new.field(i).name: new.field(i) for i in range(new.num_fields)}
    for i in range(table.num_fields):
        field = table.field(i)
        if field.name in new_names:
            merged = merge_types(field.type, new_names.pop(field.name).type, f"{path}.{field.name}")
            fields.append(field.with_type(merged.type).with_nullable(True))
            conflicts.extend(merged.conflicts)
        else:
            fields.append(field.with_nullable(True))
    fields.extend(f.with_nullable(True) for f in new_names.values())
    return Merged(pa.struct(fields), tuple(conflicts))


def merge_all(types: Iterable[pa.DataType]) -> Merged:
    merged: pa.DataType | None = None
    conflicts: list[str] = []
    for kind in types:
        step = merge_types(merged, kind)
        merged = step.type
        conflicts.extend(step.conflicts)
    if merged is None:
        raise ValueError("merge_all needs at least one type")
    return Merged(merged, tuple(conflicts))


def conform(array: pa.Array, target: pa.DataType) -> pa.Array:
    """`array` as `target` (a type merge_types gave for it): missing struct fields are null,
    and so is any value whose type conflicts. A type `target` only widens (more struct fields,
    the same data in another layout: large or view strings and binaries, large lists) is a
    cast, nested values included."""
    if isinstance(array, pa.ChunkedArray):
        return pa.chunked_array([conform(chunk, target) for chunk in array.chunks], target)
    if array.type == target:
        return array
    if _widens(array.type, target):
        try:
            return array.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass  # decomposed below
    if pa.types.is_struct(target) and pa.types.is_struct(array.type):
        present = {array.type.field(i).name for i in range(array.type.num_fields)}
        children = [
            conform(array.field(field.name), field.type)
            if field.name in present
            else pa.nulls(len(array), field.type)
            for field in target
        ]
        return pa.StructArray.from_arrays(
            children, fields=list(target), mask=array.is_null() if array.null_count else None
        )
    if pa.types.is_list(target) and _is_list(array.type):
        array = pa.concat_arrays([array]) if array.offset else array  # offsets from 0
        values = conform(array.flatten(), target.value_type)
        offsets = pc.subtract(array.offsets, array.offsets[0]).cast(pa.int32())
        return pa.ListArray.from_arrays(
            offsets, values, type=target, mask=array.is_null() if array.null_count else None
        )
    return pa.nulls(len(array), target)


_STRINGS = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
_BINARIES = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view)


def _is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind)


def _widens(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether every value of `source` is a value of `target` (no conflict anywhere)."""
    if source == target:
        return True
    for family in (_STRINGS, _BINARIES):
        if any(f(source) for f in family) and any(f(target) for f in family):
            return True
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        wanted = {target.field(i).name: target.field(i).type for i in range(target.num_fields)}
        return all(
            source.field(i).name in wanted
            and _widens(source.field(i).type, wanted[source.field(i).name])
            for i in range(source.num_fields)
        )
    if _is_list(source) and _is_list(target):
        return _widens(source.value_type, target.value_type)
    if pa.types.is_map(source) and pa.types.is_map(target):
        return source.key_type == target.key_type and _widens(source.item_type, target.item_type)
    return False


def conform_table(typed: pa.Table, targets: dict[str, pa.DataType]) -> pa.Table:
    """`typed`'s columns as `targets` (every target column; absent ones null)."""
    rows = typed.num_rows
    columns, fields = [], []
    for name, kind in targets.items():
        if name in typed.column_names:
            columns.append(conform(typed.column(name).combine_chunks(), kind))
        else:
            columns.append(pa.nulls(rows, kind))
        fields.append(pa.field(name, kind))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def concat_typed(parts: list[pa.Table | None], rows: list[int]) -> pa.Table | None:
    """The typed columns of several record groups (None: a group without any), as one table
    whose types are every part's merged."""
    if all(part is None for part in parts):
        return None
    targets: dict[str, pa.DataType] = {}
    for part in parts:
        for field in () if part is None else part.schema:
            targets[field.name] = merge_types(targets.get(field.name), field.type).type
    tables = [
        conform_table(part if part is not None else _empty_rows(count), targets)
        for part, count in zip(parts, rows, strict=True)
    ]
    return pa.concat_tables(tables)


def _empty_rows(count: int) -> pa.Table:
    return pa.table({"_": pa.nulls(count)}).drop(["_"])
