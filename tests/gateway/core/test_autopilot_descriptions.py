"""What the autopilot compares of a tool that changed between calls: the one description that
differs, the tool's own or one anywhere in its parameters' schema, and only when nothing else
differs (its name, its schema's shape, another value, a second description)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.core.cache_autopilot import _descriptions


def tool(
    description: str = "Search (generation 7).", query: str = "Words (build 7).", **extra: Any
) -> str:
    properties = {"query": {"type": "string", "description": query}, **extra}
    schema = {"type": "object", "properties": properties, "required": ["query"]}
    return json.dumps({"name": "search", "description": description, "input_schema": schema})


def test_the_tools_own_description_or_one_in_its_schema() -> None:
    assert _descriptions(tool(), tool("Search (generation 8).")) == (
        "Search (generation 7).",
        "Search (generation 8).",
    )
    assert _descriptions(tool(), tool(query="Words (build 8).")) == (
        "Words (build 7).",
        "Words (build 8).",
    )


@pytest.mark.parametrize(
    "changed",
    [
        tool("Search (generation 8).", "Words (build 8)."),  # two places at once
        tool(limit={"type": "integer"}),  # the schema's shape
        tool(limit={"type": "integer", "default": 5}).replace('"default": 5', '"default": 6'),
        tool().replace('"search"', '"find"'),  # the name
        tool().replace('"required": ["query"]', '"required": []'),
        tool().replace('"type": "string"', '"type": "number"'),  # a value, not a description
    ],
)
def test_nothing_is_compared_when_anything_else_differs(changed: str) -> None:
    before = tool(limit={"type": "integer", "default": 5}) if "default" in changed else tool()
    assert _descriptions(before, changed) is None
