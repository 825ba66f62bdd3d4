"""A reply's citations placed on its text as one string: each canonical `Citation` (indices into
its own text part, or the whole part) as a character span of the parts' texts joined, the text
OpenAI's chat `content` and a Responses `output_text` carry. Pure; each wire shapes its own
annotation from the spans.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from adapters.types import Citation, TextPart


@dataclass(frozen=True, slots=True)
class CitedSpan:
    citation: Citation
    start_index: int
    end_index: int


def spans(parts: Iterable[TextPart]) -> list[CitedSpan]:
    """The citations of `parts`, in order, as spans of `"".join(p.text for p in parts)`."""
    out: list[CitedSpan] = []
    offset = 0
    for part in parts:
        size = len(part.text)
        for c in part.citations:
            start = 0 if c.start_index is None else min(c.start_index, size)
            end = size if c.end_index is None else min(c.end_index, size)
            out.append(CitedSpan(c, offset + start, offset + max(end, start)))
        offset += size
    return out


def has_citations(parts: Iterable[object]) -> bool:
    return any(isinstance(p, TextPart) and p.citations for p in parts)
