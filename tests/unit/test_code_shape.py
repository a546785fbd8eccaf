"""Checks that keep the code's shape (import-linter keeps the layers): product functions stay
short, no import circle forms among product modules, and every module under `api/` is in one
of the layers, so the layers contract speaks for all of it."""

from __future__ import annotations

import tomllib

from tools.code_shape import FUNCTION_LINES_MAX, ROOT, import_circles, measure, product_modules


def test_no_product_function_is_longer_than_the_limit():
    shape = measure()
    assert shape.functions_over_limit == [], (
        f"Functions over {FUNCTION_LINES_MAX} lines: split them (push ifs up and fors down)."
    )


def test_no_import_circle_among_product_modules():
    assert measure().import_circles == []


def test_the_circle_finder_finds_a_circle():
    """The control: a graph with a circle (a -> b -> c -> a) and a tail (d -> a)."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_every_api_module_is_in_a_layer():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = pyproject["tool"]["importlinter"]["contracts"]
    [layers] = [c["layers"] for c in contracts if c["type"] == "layers"]
    layered = {name.strip() for layer in layers for name in layer.split("|")}
    outside = [
        module
        for module in product_modules(ROOT)
        if module.startswith("api.")
        and not any(module == name or module.startswith(name + ".") for name in layered)
    ]
    assert outside == [], "add these modules to a layer in pyproject.toml"


def _front_end_imports_from_storage() -> list[tuple[str, str, object]]:
    """(front-end module, storage module, the object) for every name `api.http` and
    `api.kafka` import from `storage_layout`."""
    import ast
    import importlib

    found = []
    for package in ("api/http", "api/kafka"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                    continue
                if not node.module.startswith("storage_layout"):
                    continue
                module = importlib.import_module(node.module)
                for alias in node.names:
                    where = str(path.relative_to(ROOT))
                    obj = getattr(module, alias.name, None)
                    if obj is None:  # a submodule (`from storage_layout.cluster import routes`)
                        obj = importlib.import_module(f"{node.module}.{alias.name}")
                    found.append((where, node.module, obj))
    return found


def test_front_ends_take_only_storage_values_not_storage_behaviour():
    """The front-ends speak storage's vocabulary (frozen value types, enums, errors, constants,
    the node-to-node codec) but reach its tables and stores only through the core: no class
    of storage that does I/O (a log, a table, a store, a client) is imported by a front-end."""
    import dataclasses
    import enum
    import inspect

    def is_value(obj: object) -> bool:
        if not inspect.isclass(obj):
            return True  # a constant, a pure function, a module (routes)
        if issubclass(obj, (BaseException, enum.Enum)):
            return True
        return dataclasses.is_dataclass(obj) and obj.__dataclass_params__.frozen

    from storage_layout.log import DeltaPartitionLog
    from storage_layout.meta.table import MetaTable
    from storage_layout.records import TopicPartition

    assert not is_value(DeltaPartitionLog) and not is_value(MetaTable)  # the control
    assert is_value(TopicPartition)
    imported = _front_end_imports_from_storage()
    assert imported, "the check found no import at all: it checks nothing"
    behaviour = [
        (where, module, obj.__name__) for where, module, obj in imported if not is_value(obj)
    ]
    assert behaviour == [], "reach these through api.core instead"
