"""The shape of the product code, measured with the standard library's `ast`: the figures the
"one node, one path" issue reports before and after (class sizes, the largest file, the longest
function, who imports httpx, import circles among product modules).

    python tools/code_shape.py            # a table
    python tools/code_shape.py --json     # the same figures as JSON
    python tools/code_shape.py --root ../other-checkout
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT_PACKAGES = ("api", "storage_layout", "pipeline", "jobs", "conf")
WATCHED_CLASSES = ("Broker", "DeltaPartitionLog")
FUNCTION_LINES_MAX = 70


@dataclass(frozen=True, slots=True)
class Shape:
    class_lines: dict[str, int]
    product_lines: int
    largest_file: tuple[str, int]
    longest_function: tuple[str, int]
    functions_over_limit: list[tuple[str, int]]
    httpx_importers: list[str]
    import_circles: list[list[str]]


def product_modules(root: Path) -> dict[str, Path]:
    modules = {}
    for package in PRODUCT_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def function_lengths(name: str, tree: ast.Module) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append((f"{name}:{node.name}", node.end_lineno - node.lineno + 1))
    return found


def imported_modules(name: str, tree: ast.Module, is_package: bool, known: set[str]) -> set[str]:
    """Every module the file imports at any depth (lazy imports inside functions count too).
    `from package import module` depends on the module alone, not on the package's
    `__init__` (which Python runs for any of its modules): else every package whose
    `__init__` gathers its modules would be a circle."""
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(name, node, is_package)
            for alias in node.names:
                module = f"{base}.{alias.name}"
                imported.add(module if module in known else base)
    return imported


def _absolute(name: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = name.split(".")
    keep = len(parts) - node.level + (1 if is_package else 0)
    return ".".join(parts[:keep] + ([node.module] if node.module else []))


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for target in edges:
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return sorted(circles)


def measure(root: Path = ROOT) -> Shape:
    modules = product_modules(root)
    class_lines: dict[str, int] = {}
    functions: list[tuple[str, int]] = []
    file_lines: list[tuple[str, int]] = []
    httpx_importers: list[str] = []
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        source = path.read_text()
        tree = ast.parse(source)
        file_lines.append((str(path.relative_to(root)), len(source.splitlines())))
        functions.extend(function_lengths(name, tree))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in WATCHED_CLASSES:
                class_lines[node.name] = node.end_lineno - node.lineno + 1
        imported = imported_modules(name, tree, path.name == "__init__.py", set(modules))
        if any(module == "httpx" or module.startswith("httpx.") for module in imported):
            httpx_importers.append(name)
        graph[name] = {module for module in imported if module in modules and module != name}
    functions.sort(key=lambda item: -item[1])
    file_lines.sort(key=lambda item: -item[1])
    return Shape(
        class_lines=class_lines,
        product_lines=sum(lines for _, lines in file_lines),
        largest_file=file_lines[0],
        longest_function=functions[0],
        functions_over_limit=[f for f in functions if f[1] > FUNCTION_LINES_MAX],
        httpx_importers=sorted(httpx_importers),
        import_circles=import_circles(graph),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure")
    args = parser.parse_args(argv)
    shape = measure(args.root.resolve())
    if args.json:
        print(json.dumps(asdict(shape), indent=2))
        return 0
    for cls in WATCHED_CLASSES:
        print(f"class {cls}: {shape.class_lines.get(cls, 0)} lines")
    print(f"product lines: {shape.product_lines}")
    print(f"largest file: {shape.largest_file[0]} ({shape.largest_file[1]} lines)")
    print(f"longest function: {shape.longest_function[0]} ({shape.longest_function[1]} lines)")
    print(f"functions over {FUNCTION_LINES_MAX} lines: {len(shape.functions_over_limit)}")
    print(f"modules importing httpx ({len(shape.httpx_importers)}):")
    for module in shape.httpx_importers:
        print(f"  {module}")
    print(f"import circles ({len(shape.import_circles)}):")
    for circle in shape.import_circles:
        print("  " + " <-> ".join(circle))
    return 0


if __name__ == "__main__":
    sys.exit(main())
