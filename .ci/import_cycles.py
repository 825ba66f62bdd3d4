"""Fail when an import cycle runs through the shipped packages, or between `gateway.<sub>` packages.

Every import statement counts, wherever it sits: at the top, under `TYPE_CHECKING`, inside a
function. A cycle is a design bug (docs/architecture.md): move the shared protocol down, or let one
side notify observers. Reads source only (ast); imports nothing of ours.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGES = (
    "gateway",
    "routing",
    "cachekeys",
    "quotas",
    "sandbox",
    "policies",
    "adapters",
    "selfhost",
)
LAYERED = "gateway"  # its direct subpackages must import each other one way

Graph = Mapping[str, set[str]]


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules_of(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(root, path)] = path
    return found


def imported_names(tree: ast.AST, name: str, is_package: bool) -> Iterable[str]:
    """Dotted names each import statement of a module loads (`from a import b`: a.b, which is `a`
    itself when b is not a submodule)."""
    here = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module → the modules of ours it imports (the deepest existing module of each name)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        targets: set[str] = set()
        for imported in imported_names(tree, name, path.name == "__init__.py"):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
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
                        found.append(sorted(component))
    return sorted(found)


def subpackage_graph(graph: Graph, top: str) -> dict[str, set[str]]:
    """`top.<sub>` → the other `top.<sub>` it imports (modules directly under `top` count as subs)."""

    def sub(module: str) -> str | None:
        parts = module.split(".")
        return ".".join(parts[:2]) if parts[0] == top and len(parts) > 1 else None

    folded: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = sub(module)
        if source is None:
            continue
        edges = folded.setdefault(source, set())
        edges.update(t for t in map(sub, targets) if t is not None and t != source)
    return folded


def main(root: Path) -> int:
    graph = import_graph(modules_of(root, PACKAGES))
    failures = [("module cycle", c) for c in cycles(graph)]
    failures += [
        (f"{LAYERED} subpackage cycle", c) for c in cycles(subpackage_graph(graph, LAYERED))
    ]
    for kind, members in failures:
        print(f"{kind}: {' <-> '.join(members)}")
    print(f"import cycles: {len(graph)} modules, {len(failures)} cycles")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()))
