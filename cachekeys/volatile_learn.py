"""Learning a volatile place from two versions of one system text: the short span that differs,
between the same context on both sides, becomes a pattern that relocates that place.

Pure. A place is learnt only when the change is one value (one word: no white space) on one line,
not an instruction edit, and the pattern it gives matches exactly the two values it was learnt
from.
"""

from __future__ import annotations

import re

CONTEXT_CHARS = 24  # the anchors on each side of the value
MAX_VALUE_CHARS = 64
VALUE_CHARS = frozenset("_-.:+/#")  # a value's inner punctuation (ids, times, versions)


def learn_place(old: str, new: str, repeated: bool = False) -> str | None:
    """The pattern of the one place where `old` and `new` differ, or None. A value with no digit
    is learnt only when `repeated` (the same block changed on the previous call too)."""
    if old == new:
        return None
    start = _common_prefix(old, new)
    end = _common_suffix(old, new, start)
    while start > 0 and _is_value_char(old[start - 1]):
        start -= 1
    while end > 0 and _is_value_char(old[len(old) - end]):
        end -= 1
    a, b = old[start : len(old) - end], new[start : len(new) - end]
    if not (a and b) or max(len(a), len(b)) > MAX_VALUE_CHARS or _has_space(a + b):
        return None
    if not repeated and not any(c.isdigit() for c in a + b):
        return None
    # the context stays on the value's line: a line added above (a scope line) keeps the place
    left = old[max(0, start - CONTEXT_CHARS) : start].rpartition("\n")[2]
    right = old[len(old) - end : len(old) - end + CONTEXT_CHARS].partition("\n")[0]
    if not (left or right) or "{{volatile:" in left + right:
        return None
    pattern = _pattern(left, right)
    found = [re.search(pattern, text) for text in (old, new)]
    if [m.group(0) if m else None for m in found] != [a, b]:
        return None
    return pattern


def _pattern(left: str, right: str) -> str:
    head = f"(?<={re.escape(left)})" if left else r"(?:^|(?<=\n))"
    tail = f"(?={re.escape(right)})" if right else r"(?=\n|\Z)"
    return head + r"[^\n]{1," + str(MAX_VALUE_CHARS) + "}?" + tail


def _has_space(text: str) -> bool:
    return any(c.isspace() for c in text)


def _is_value_char(char: str) -> bool:
    return char.isalnum() or char in VALUE_CHARS


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_suffix(a: str, b: str, prefix: int) -> int:
    n = min(len(a), len(b)) - prefix
    i = 0
    while i < n and a[len(a) - 1 - i] == b[len(b) - 1 - i]:
        i += 1
    return i
