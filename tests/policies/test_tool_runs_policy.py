"""`tool_runs:` in a tenant policy: the cap on concurrent tool runs, its default and its bounds."""

from __future__ import annotations

import pytest

from policies.errors import PolicyFileError
from policies.loader import load_policy_text


def _load(section: str) -> int:
    text = f"tenant: acme\n{section}"
    return load_policy_text(
        text, "acme.yaml", expected_tenant="acme"
    ).policy.tool_runs.max_concurrent


def _issues(section: str) -> list[str]:
    with pytest.raises(PolicyFileError) as caught:
        _load(section)
    return [str(issue) for issue in caught.value.issues]


def test_default_and_explicit_caps() -> None:
    assert [
        _load(""),
        _load("tool_runs: {max_concurrent: 1}\n"),
        _load("tool_runs: {max_concurrent: 256}\n"),
    ] == [4, 1, 256]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("0", "Input should be greater than or equal to 1"),
        ("257", "Input should be less than or equal to 256"),
        ("2.5", "Input should be a valid integer"),
        ("'3'", "Input should be a valid integer"),
        ("true", "Input should be a valid integer"),
    ],
)
def test_caps_outside_1_to_256_or_not_integers_are_refused(value: str, reason: str) -> None:
    assert _issues(f"tool_runs:\n  max_concurrent: {value}\n") == [
        f"acme.yaml:3: tool_runs.max_concurrent: {reason}"
    ]


def test_unknown_key_in_tool_runs_is_refused() -> None:
    assert _issues("tool_runs:\n  max_runs: 3\n") == [
        "acme.yaml:3: tool_runs.max_runs: unknown key (allowed: max_concurrent)"
    ]
