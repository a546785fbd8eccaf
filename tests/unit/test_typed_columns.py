"""How typed columns widen and what a value of another shape becomes (FORMAT.md §17): only
widening is a cast; a conflict is null, never another type in the column."""

from __future__ import annotations

import pyarrow as pa

from storage_layout.schemas.typed_columns import conform, field_names, merge_types

X = pa.struct([("x", pa.int64())])
XY = pa.struct([("x", pa.int64()), ("y", pa.string())])


def test_structs_widen_and_conflicts_keep_the_tables_type():
    assert merge_types(X, XY).type == XY and not merge_types(X, XY).conflicts
    conflict = merge_types(XY, pa.struct([("x", pa.string())]))
    assert conflict.type == XY and conflict.conflicts


def test_maps_lists_and_other_layouts_widen_by_cast():
    values = pa.array([[("a", {"x": 1})], None], type=pa.map_(pa.string(), X))
    assert conform(values, pa.map_(pa.string(), XY)).to_pylist() == [
        [("a", {"x": 1, "y": None})],
        None,
    ]
    assert conform(pa.array(["a", None], pa.large_string()), pa.string()).to_pylist() == ["a", None]
    sliced = pa.array([[{"x": 1}], None, [{"x": 2}]], type=pa.list_(pa.field("element", X)))[1:]
    target = pa.list_(pa.field("element", pa.struct([("x", pa.string()), ("y", pa.int64())])))
    assert conform(sliced, target).to_pylist() == [None, [{"x": None, "y": None}]]


def test_a_conflicting_value_is_null_not_cast():
    assert conform(pa.array([1, 2]), pa.string()).to_pylist() == [None, None]


def test_field_names_are_delta_safe_and_unique_ignoring_case():
    assert field_names(["first name", "a=b", "A", "a", "a"]) == [
        "first_name",
        "a_b",
        "A",
        "a_2",
        "a_3",
    ]
