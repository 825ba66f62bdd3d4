"""The words of the outside traces: prose, code, tool outputs and tools, from one seeded
random source. Owns no session shape; `generate_outside.py` builds the sessions.
"""

from __future__ import annotations

import random
from typing import Any

WORDS = [
    "the",
    "request",
    "handler",
    "retries",
    "each",
    "upstream",
    "call",
    "with",
    "a",
    "bounded",
    "backoff",
    "and",
    "records",
    "the",
    "latency",
    "of",
    "every",
    "attempt",
    "in",
    "a",
    "histogram",
    "so",
    "that",
    "operators",
    "can",
    "see",
    "which",
    "replica",
    "is",
    "slow",
    "while",
    "the",
    "scheduler",
    "keeps",
    "a",
    "queue",
    "per",
    "tenant",
    "and",
    "admits",
    "work",
    "in",
    "fair",
    "shares",
    "until",
    "the",
    "budget",
    "for",
    "the",
    "window",
    "runs",
    "out",
    "then",
    "it",
    "answers",
    "with",
    "a",
    "clear",
    "error",
    "that",
    "names",
    "the",
    "limit",
    "a",
    "migration",
    "adds",
    "the",
    "column",
    "with",
    "a",
    "default",
    "value",
    "and",
    "backfills",
    "the",
    "rows",
    "in",
    "batches",
    "of",
    "a",
    "thousand",
    "so",
    "the",
    "table",
    "stays",
    "online",
    "during",
    "the",
    "deploy",
    "and",
    "the",
    "index",
    "is",
    "built",
    "concurrently",
]
NOUNS = [
    "invoice",
    "order",
    "ledger",
    "tenant",
    "session",
    "replica",
    "cursor",
    "payload",
    "schema",
    "token",
    "budget",
    "window",
    "queue",
    "worker",
    "config",
    "report",
    "account",
    "refund",
    "customer",
    "shipment",
]
VERBS = [
    "load",
    "save",
    "apply",
    "resolve",
    "refresh",
    "render",
    "parse",
    "validate",
    "merge",
    "flush",
    "settle",
    "retry",
]


class Text:
    """Seeded prose, code and tool output; every call draws from the same stream."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def sentence(self, num_words: int = 14) -> str:
        start = self.rng.randrange(len(WORDS))
        words = [WORDS[(start + i * 7) % len(WORDS)] for i in range(num_words)]
        return " ".join(words).capitalize() + "."

    def prose(self, num_sentences: int) -> str:
        return " ".join(self.sentence(self.rng.randint(9, 20)) for _ in range(num_sentences))

    def ident(self) -> str:
        return f"{self.rng.choice(VERBS)}_{self.rng.choice(NOUNS)}"

    def code(self, num_lines: int) -> str:
        lines = [f"class {self.rng.choice(NOUNS).title()}Service:"]
        for _ in range(num_lines):
            name, arg = self.ident(), self.rng.choice(NOUNS)
            lines.append(f"    def {name}(self, {arg}: str) -> None:")
            lines.append(f"        return self.{self.rng.choice(NOUNS)}.{name}({arg})")
        return "\n".join(lines)

    def grep(self, num_hits: int) -> str:
        hits = []
        for _ in range(num_hits):
            path = f"src/{self.rng.choice(NOUNS)}/{self.ident()}.py"
            hits.append(f"{path}:{self.rng.randint(1, 900)}:    {self.ident()}(self)")
        return "\n".join(hits)

    def test_log(self, num_tests: int) -> str:
        rows = []
        for i in range(num_tests):
            status = "FAILED" if self.rng.random() < 0.1 else "PASSED"
            rows.append(f"tests/test_{self.rng.choice(NOUNS)}.py::test_{self.ident()}_{i} {status}")
        return "\n".join(rows) + f"\n{num_tests} tests ran"

    def hex(self, num_chars: int) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(num_chars))

    def uuid(self) -> str:
        h = self.hex(32)
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"

    def tool_output(self, name: str) -> str:
        if name in ("read_file", "Read", "open_url"):
            return self.code(self.rng.randint(20, 70))
        if name in ("grep", "Grep", "search_code", "web_search"):
            return self.grep(self.rng.randint(10, 40))
        if name in ("run_tests", "Bash", "shell"):
            return self.test_log(self.rng.randint(15, 60))
        return self.prose(self.rng.randint(6, 24))

    def tool_args(self, name: str) -> dict[str, Any]:
        """Arguments as the model wrote them, in its key order."""
        path = f"src/{self.rng.choice(NOUNS)}/{self.ident()}.py"
        if name in ("read_file", "Read"):
            return {"file_path": path, "offset": self.rng.randint(0, 200), "limit": 400}
        if name in ("grep", "Grep", "search_code"):
            return {"pattern": self.ident(), "path": "src", "output_mode": "content", "-n": True}
        if name in ("run_tests", "Bash", "shell"):
            return {"command": f"pytest -q tests/test_{self.rng.choice(NOUNS)}.py", "timeout": 120}
        return {"query": self.sentence(6), "max_results": self.rng.randint(3, 10), "path": path}


def tool_specs(text: Text, names: list[str], detail_sentences: int) -> list[dict[str, Any]]:
    """Neutral tool specs (name, description, schema), in the framework's own order."""
    specs = []
    for name in names:
        properties: dict[str, Any] = {}
        for field, value in text.tool_args(name).items():
            kind = {bool: "boolean", int: "integer"}.get(type(value), "string")
            properties[field] = {"type": kind, "description": text.sentence(10)}
        specs.append(
            {
                "name": name,
                "description": text.prose(detail_sentences),
                "schema": {
                    "type": "object",
                    "properties": properties,
                    "required": sorted(properties)[:2],
                    "additionalProperties": False,
                },
            }
        )
    return specs
