"""Report the largest module and function of the packages, and fail past the size limits.

Limits: a module past 400 lines, a function past 60 lines, a constructor (`__init__`) taking
more than 8 parameters. The remedy is a cut along concepts, never a squeeze (docs/architecture.md, CONTRIBUTING.md).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass

MODULE_LINES = 400
FUNCTION_LINES = 60
INIT_PARAMS = 8
PACKAGES = (
    "gateway/",
    "routing/",
    "cachekeys/",
    "quotas/",
    "sandbox/",
    "policies/",
    "adapters/",
    "selfhost/",
)


@dataclass(frozen=True)
class Shape:
    where: str
    size: int


def package_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "*.py"], capture_output=True, text=True, check=True)
    return [path for path in listed.stdout.split() if path.startswith(PACKAGES)]


def init_params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    count = len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
    return count - 1 if args.args or args.posonlyargs else count  # not `self`


def shapes(path: str, source: str) -> tuple[list[Shape], list[Shape]]:
    """Every function of one module (`path:line name`, lines) and every `__init__` (params)."""
    functions: list[Shape] = []
    inits: list[Shape] = []
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            where = f"{path}:{node.lineno} {node.name}"
            functions.append(Shape(where, (node.end_lineno or node.lineno) - node.lineno + 1))
            if node.name == "__init__":
                inits.append(Shape(where, init_params(node)))
    return functions, inits


def main() -> int:
    modules: list[Shape] = []
    functions: list[Shape] = []
    inits: list[Shape] = []
    for path in package_files():
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
        modules.append(Shape(path, source.count("\n")))
        found, constructors = shapes(path, source)
        functions += found
        inits += constructors
    largest_module = max(modules, key=lambda s: s.size)
    largest_function = max(functions, key=lambda s: s.size)
    print(f"largest module: {largest_module.where} ({largest_module.size} lines)")
    print(f"largest function: {largest_function.where} ({largest_function.size} lines)")
    faults = [
        f"{s.where}: {s.size} lines (limit {MODULE_LINES})"
        for s in modules
        if s.size > MODULE_LINES
    ]
    faults += [
        f"{s.where}: {s.size} lines (limit {FUNCTION_LINES})"
        for s in functions
        if s.size > FUNCTION_LINES
    ]
    faults += [
        f"{s.where}: {s.size} parameters (limit {INIT_PARAMS})"
        for s in inits
        if s.size > INIT_PARAMS
    ]
    for fault in faults:
        print(fault)
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
