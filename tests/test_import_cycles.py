"""No import cycles between the modules of src/toolorchestra, imports inside functions included.

Every `import` and `from ... import` statement anywhere in a module counts (a function-level import is as much a
dependency as a top-level one, it only runs later); imports under `if TYPE_CHECKING:` do not (they never run).
A `from package import name` where `name` is a submodule depends on that submodule. A cycle is reported as its
modules with the lines that tie them, so the failure says where to cut.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "toolorchestra"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    path: Path
    line: int


def module_files(src: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under src/package (a package is named by its __init__.py)."""
    found = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Import statements that can run: all of them except those in the body of an `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)  # the else branch does run
            continue
        pending.extend(ast.iter_child_nodes(node))
    return found


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement may load (relative imports resolved against `module`)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The module of the package that `name` is or lies in (`a.b.func` -> `a.b`), if any."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(src: Path, package: str) -> dict[str, list[Edge]]:
    """module -> its imports of other modules of the package (first line per target)."""
    modules = module_files(src, package)
    edges: dict[str, list[Edge]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        first: dict[str, Edge] = {}
        for node in _runtime_imports(tree):
            for name in _imported_names(node, module, path.name == "__init__.py"):
                target = _known(name, modules)
                if target and target != module:
                    edge = Edge(module, target, path, node.lineno)
                    if target not in first or edge.line < first[target].line:
                        first[target] = edge
        edges[module] = sorted(first.values(), key=lambda edge: edge.target)
    return edges


def find_cycles(edges: dict[str, list[Edge]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (iterative Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            targets = [edge.target for edge in edges.get(node, [])]
            if position < len(targets):
                work.append((node, position + 1))
                target = targets[position]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
            if work:  # hand the low link back to the caller
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return groups


def describe(group: list[str], edges: dict[str, list[Edge]], src: Path) -> str:
    members = set(group)
    lines = [f"cycle of {len(group)} modules: {', '.join(group)}"]
    for module in group:
        for edge in edges[module]:
            if edge.target in members:
                lines.append(f"  {edge.path.relative_to(src.parent)}:{edge.line} imports {edge.target}")
    return "\n".join(lines)


def test_no_import_cycles_in_the_package() -> None:
    edges = import_edges(SRC, PACKAGE)
    assert len(edges) > 100, f"found only {len(edges)} modules under {SRC / PACKAGE}"
    cycles = find_cycles(edges)
    assert not cycles, "import cycles (cut one import of each):\n" + "\n".join(
        describe(group, edges, SRC) for group in cycles)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_finds_function_level_and_relative_cycles_and_skips_type_checking(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "def f():\n    from pkg import b\n",  # a -> b, inside a function
        "pkg/b.py": "from .c import thing\n",  # b -> c, relative
        "pkg/c.py": "import pkg.a\nthing = 1\n",  # c -> a: the cycle a, b, c
        "pkg/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import e\n",
        "pkg/e.py": "from pkg.d import TYPE_CHECKING\n",  # e -> d only: d -> e never runs
    })
    edges = import_edges(tmp_path, "pkg")
    assert find_cycles(edges) == [["pkg.a", "pkg.b", "pkg.c"]]
    report = describe(["pkg.a", "pkg.b", "pkg.c"], edges, tmp_path)
    assert "pkg/a.py:2 imports pkg.b" in report and "pkg/c.py:1 imports pkg.a" in report
    assert [edge.target for edge in edges["pkg.d"]] == []
