"""The package's import graph has no circle between its parts.

Each subpackage of `pgsched` (worker/, hot_tier/, observability/, cli/, dashboard/) is one
part, and so is each top-level module (tasks.py, claims.py, sweeps.py...). Every import is
counted, wherever it stands: at the top of a module, inside a function (imported late to
spare a dependency) or under `if TYPE_CHECKING:`, since each still ties one part to the
other. `pgsched/__init__.py` is left out: it only re-exports the public API.

The worker composes the hot tier (worker -> hot_tier); what both need (the claimed row,
the claim statements, how a task is named in a log line) lives in the module that owns
the concept (`pgsched/tasks.py`, `pgsched/claims.py`), so nothing imports back.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pgsched"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_of(module: str) -> str | None:
    """The part a module belongs to: `pgsched.worker` for `pgsched.worker.leases`,
    `pgsched.tasks` for itself; None for the package root and for other packages."""
    parts = module.split(".")
    if parts[0] != "pgsched" or len(parts) < 2:
        return None
    return ".".join(parts[:2])


def resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(path: Path, importer: str) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import of this file (module `importer`), nested
    ones included. For `from pgsched import x`, x is the module when pgsched/x is one."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            target = resolve(importer, path.name == "__init__.py", node)
            if target == "pgsched":
                for alias in node.names:
                    sub = PACKAGE / alias.name
                    if sub.is_dir() or sub.with_suffix(".py").exists():
                        yield f"pgsched.{alias.name}", node.lineno
                    else:
                        yield target, node.lineno
            else:
                yield target, node.lineno


def part_graph() -> dict[str, dict[str, list[str]]]:
    """part -> imported part -> where ("file:line"), between distinct parts."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = module_name(path)
        source = part_of(importer)
        if source is None:
            continue
        graph.setdefault(source, {})
        for target_module, line in imports(path, importer):
            target = part_of(target_module)
            if target is None or target == source:
                continue
            where = f"{path.relative_to(PACKAGE.parent)}:{line}"
            graph[source].setdefault(target, []).append(where)
    return graph


def circles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one part (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph.get(node, {}):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def describe(graph: dict[str, dict[str, list[str]]], component: list[str]) -> str:
    edges = [
        f"  {source} -> {target} ({', '.join(graph[source][target][:3])})"
        for source in component
        for target in sorted(graph[source])
        if target in component
    ]
    return "circle between " + ", ".join(component) + ":\n" + "\n".join(edges)


def test_no_circle_between_the_parts_of_the_package() -> None:
    graph = part_graph()
    assert "pgsched.worker" in graph and "pgsched.hot_tier" in graph  # the walk found them
    found = circles(graph)
    assert not found, "\n".join(describe(graph, component) for component in found)


def test_the_worker_uses_the_hot_tier_and_the_hot_tier_not_the_worker() -> None:
    graph = part_graph()
    assert "pgsched.hot_tier" in graph["pgsched.worker"]
    assert "pgsched.worker" not in graph["pgsched.hot_tier"], graph["pgsched.hot_tier"]


def test_the_check_sees_a_circle_through_a_late_import(tmp_path: Path) -> None:
    """The checker itself: a late import inside a function closes a circle it reports."""
    graph = {
        "pgsched.worker": {"pgsched.hot_tier": ["pgsched/worker/a.py:3"]},
        "pgsched.hot_tier": {"pgsched.tasks": ["pgsched/hot_tier/b.py:1"]},
        "pgsched.tasks": {"pgsched.worker": ["pgsched/tasks.py:9"]},
        "pgsched.cli": {"pgsched.worker": ["pgsched/cli/c.py:2"]},
    }
    assert circles(graph) == [["pgsched.hot_tier", "pgsched.tasks", "pgsched.worker"]]
    text = describe(graph, circles(graph)[0])
    assert "pgsched.tasks -> pgsched.worker (pgsched/tasks.py:9)" in text

    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "def f():\n"
        "    from pgsched.worker.threads import running_task\n"
        "if TYPE_CHECKING:\n"
        "    import pgsched.hot_tier.feed\n"
    )
    found = list(imports(module, "pgsched.m"))
    assert ("pgsched.worker.threads", 3) in found
    assert ("pgsched.hot_tier.feed", 5) in found


@pytest.mark.parametrize(
    ("importer", "is_package", "level", "module", "expected"),
    [
        ("pgsched.hot_tier.claims", False, 1, "keys", "pgsched.hot_tier.keys"),
        ("pgsched.hot_tier", True, 1, "config", "pgsched.hot_tier.config"),
        ("pgsched.worker.lane_engine", False, 2, "tasks", "pgsched.tasks"),
    ],
)
def test_relative_imports_resolve(
    importer: str, is_package: bool, level: int, module: str, expected: str
) -> None:
    node = ast.ImportFrom(module=module, names=[ast.alias(name="x")], level=level)
    assert resolve(importer, is_package, node) == expected
