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
