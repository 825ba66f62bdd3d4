"""What the README and docs/policy.md tell users about reports and budgets matches the code:
the group-by keys `lantern report cost` takes, and what `monthly_budget_usd` leaves out."""

from __future__ import annotations

import re
from pathlib import Path

from gateway.ledger.queries import GROUP_KEYS

ROOT = Path(__file__).resolve().parents[3]


def test_the_readme_lists_every_group_by_key() -> None:
    """The README's list lacked `door` and `kind`, which the CLI and the admin API take."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = re.search(r"`lantern report cost \[.*?--group-by ([a-z\\|]+) \.\.\.\]", readme)
    assert listed is not None
    assert sorted(listed.group(1).split("\\|")) == sorted(GROUP_KEYS)


def test_the_budget_row_says_tool_runs_are_not_counted() -> None:
    """The row listed what the budget counts, not that tool runs (kind `tool_run`) are left
    out (the quota store's seed and the console's budget lines leave them out)."""
    policy = (ROOT / "docs" / "policy.md").read_text(encoding="utf-8")
    row = next(line for line in policy.splitlines() if line.startswith("| `monthly_budget_usd`"))
    assert "tool runs (billed in the ledger with kind `tool_run`) are not counted" in row
    anchor = re.search(r"\(sandbox\.md#([\w-]+)\)", row)
    assert anchor is not None and anchor.group(1) == "tool-runs-and-monthly_budget_usd"
    sandbox = (ROOT / "docs" / "sandbox.md").read_text(encoding="utf-8")
    assert "### Tool runs and `monthly_budget_usd`" in sandbox  # the anchor's heading
