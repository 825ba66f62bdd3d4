"""The docs name the test files that show each promise (`docs/*.md`): every test file they
cite exists, so a reader who follows one finds it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITED = re.compile(r"`(tests/[\w./-]+\.py)")


def test_every_test_file_the_docs_cite_exists() -> None:
    cited = {
        (doc.relative_to(ROOT).as_posix(), path)
        for doc in sorted((ROOT / "docs").rglob("*.md"))
        for path in CITED.findall(doc.read_text(encoding="utf-8"))
    }
    assert len(cited) > 50  # the pattern still finds the docs' citations
    missing = sorted((doc, path) for doc, path in cited if not (ROOT / path).is_file())
    assert missing == []
