"""The docs name the files that show each promise (`docs/*.md`, the README): every file or
folder of the project they cite exists, so a reader who follows one finds it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = "adapters|bench|cachekeys|deploy|docs|examples|gateway|migrations|policies|quotas|routing"
CITED = re.compile(rf"`((?:{TOP}|sandbox|selfhost|tests)/[\w./-]*[\w/])(?=`|::|:\d|#)")


def test_every_file_the_docs_cite_exists() -> None:
    docs = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
    cited = {
        (doc.relative_to(ROOT).as_posix(), path)
        for doc in docs
        for path in CITED.findall(doc.read_text(encoding="utf-8"))
    }
    assert len(cited) > 200  # the pattern still finds the docs' citations
    missing = sorted((doc, path) for doc, path in cited if not (ROOT / path).exists())
    assert missing == []
