"""`.ci/import_cycles.py` (run by `make check`): it finds a cycle however the imports hide it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

CHECKER = Path(__file__).resolve().parents[2] / ".ci" / "import_cycles.py"


@pytest.fixture(scope="module")
def checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_cycles", CHECKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["import_cycles"] = module  # dataclasses and annotations look it up by name
    spec.loader.exec_module(module)
    return module


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def cycles_in(checker: ModuleType, root: Path, top: str) -> list[list[str]]:
    return checker.cycles(checker.import_graph(checker.modules_of(root, [top])))


def test_a_cycle_under_type_checking_and_inside_a_function_is_found(
    checker: ModuleType, tmp_path: Path
) -> None:
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
            "pkg/b.py": "def f():\n    from . import c\n",
            "pkg/c.py": "import pkg.a\n",
            "pkg/d.py": "from pkg import a\n",  # imports into the cycle, is not on it
        },
    )
    assert cycles_in(checker, tmp_path, "pkg") == [["pkg.a", "pkg.b", "pkg.c"]]


def test_one_way_imports_pass(checker: ModuleType, tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import A\n",
            "pkg/a.py": "from pkg.b import B\nA = B\n",
            "pkg/b.py": "import json\nB = 1\n",
        },
    )
    assert cycles_in(checker, tmp_path, "pkg") == []


def test_subpackages_importing_each_other_are_a_cycle(checker: ModuleType, tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "top/__init__.py": "",
            "top/core/__init__.py": "",
            "top/core/pipeline.py": "from top.fleet.book import Book\n",
            "top/fleet/__init__.py": "",
            "top/fleet/book.py": "Book = 1\n",
            "top/fleet/probe.py": "from top.core.pipeline import x\n",
        },
    )
    graph = checker.import_graph(checker.modules_of(tmp_path, ["top"]))
    assert checker.cycles(graph) == []  # no module cycle ...
    assert checker.cycles(checker.subpackage_graph(graph, "top")) == [["top.core", "top.fleet"]]


def test_the_shipped_packages_have_no_cycle(checker: ModuleType) -> None:
    assert checker.main(CHECKER.parents[1]) == 0
