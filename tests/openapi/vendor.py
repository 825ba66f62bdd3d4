"""Regenerate `openai-2.3.0.json` from OpenAI's `openapi.json` (github.com/openai/openai-openapi):
`python -m tests.openapi.vendor path/to/openapi.json COMMIT`. Keeps the component schemas
reachable from ROOTS and drops what only documents them (descriptions, titles, examples, `x-`
extensions); nothing that validates is changed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

ROOTS = (
    "CreateChatCompletionResponse",
    "CreateChatCompletionStreamResponse",
    "CreateEmbeddingResponse",
    "ListModelsResponse",
    "Model",
    "ErrorResponse",
    "Response",
    "ResponseItemList",
    "ResponseStreamEvent",
)
DOCS_ONLY = frozenset({"description", "title", "example", "examples", "deprecated"})
NAME_MAPS = frozenset({"properties", "patternProperties", "$defs"})  # keys there are names


def strip(node: Any, names: bool = False) -> Any:
    if isinstance(node, list):
        return [strip(x) for x in node]
    if not isinstance(node, dict):
        return node
    if names:  # a map of property names to schemas: every key kept
        return {k: strip(v) for k, v in node.items()}
    return {
        k: strip(v, names=k in NAME_MAPS)
        for k, v in node.items()
        if k not in DOCS_ONLY and not k.startswith("x-")
    }


def closure(schemas: dict[str, Any], roots: tuple[str, ...]) -> set[str]:
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        pending = [schemas[name]]
        while pending:
            node = pending.pop()
            if isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str):
                    stack.append(ref.rsplit("/", 1)[-1])
                pending.extend(node.values())
            elif isinstance(node, list):
                pending.extend(node)
    return seen


def main() -> None:
    source, commit = Path(sys.argv[1]), sys.argv[2]
    doc = orjson.loads(source.read_bytes())
    schemas = doc["components"]["schemas"]
    out = {
        "source": f"https://github.com/openai/openai-openapi openapi.json (commit {commit})",
        "version": doc["info"]["version"],
        "openapi": doc["openapi"],
        "roots": list(ROOTS),
        "components": {"schemas": {k: strip(schemas[k]) for k in sorted(closure(schemas, ROOTS))}},
    }
    target = Path(__file__).with_name(f"openai-{out['version']}.json")
    target.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2) + b"\n")


if __name__ == "__main__":
    main()
