"""OpenAI's published response schemas (vendored: `openai-2.3.0.json`, source and version in its
`source` and `version` keys) and a check that a body Lantern wrote is valid against one.

Only the component schemas the tests need are vendored, with their `$ref` closure
(`vendor.py` makes the file).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

VENDORED = Path(__file__).with_name("openai-2.3.0.json")


@functools.cache
def _document() -> dict[str, Any]:
    doc: dict[str, Any] = _nullable(orjson.loads(VENDORED.read_bytes()))
    return doc


def _nullable(node: Any) -> Any:
    """The document still marks a few schemas with OpenAPI 3.0's `nullable: true` (a chunk's
    `finish_reason`, `logprobs` and `usage`), which JSON Schema ignores: read it as OpenAPI
    means it, null allowed."""
    if isinstance(node, list):
        return [_nullable(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _nullable(v) for k, v in node.items() if k != "nullable"}
    return {"anyOf": [{"type": "null"}, out]} if node.get("nullable") is True else out


@functools.cache
def _validator(name: str) -> Draft202012Validator:
    doc = _document()
    if name not in doc["components"]["schemas"]:
        raise KeyError(f"{name} is not vendored (roots: {doc['roots']})")
    schema = {"components": doc["components"], "$ref": f"#/components/schemas/{name}"}
    return Draft202012Validator(schema)


def errors(name: str, body: Any) -> list[str]:
    """Each way `body` breaks the schema `name`, as `path: message` (empty: valid)."""
    found = [_deepest(e) for e in _validator(name).iter_errors(body)]
    return [f"{'/'.join(map(str, e.absolute_path)) or '.'}: {e.message}" for e in found]


def _deepest(error: ValidationError) -> ValidationError:
    """Inside an `anyOf` (the events, the output items), the branch's own error, not
    "is not valid under any of the given schemas"."""
    while error.context:
        error = best_match(error.context)
    return error


def check(name: str, body: Any) -> None:
    """Raise AssertionError naming every way `body` breaks OpenAI's schema `name`."""
    problems = errors(name, body)
    assert not problems, f"{name}: " + "; ".join(problems[:5])
