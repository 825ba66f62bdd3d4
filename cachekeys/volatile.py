"""Volatile values: the named patterns, one compiled matcher per pattern set, and the relocator
that swaps values for numbered placeholders (the wire bodies are walked in cachekeys/relocation.py).

Pure apart from a bounded memo of scans per distinct text: an agent sends the same system
prompt and tools on every call, so each distinct text is scanned once, not once per call.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from adapters.types import JSON

DEFAULT_VOLATILE_PATTERNS: tuple[str, ...] = (
    # ISO-8601 date-times (2026-11-30T09:18:42Z, 2026-11-30 09:18:42.123+01:00)
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?",
    r"\b\d{4}-\d{2}-\d{2}\b",  # dates
    r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?(?:[AaPp][Mm]\b|[AaPp]\.[Mm]\.))?",  # 15:07, 3:07 PM
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",  # UUIDs
    r"\b(?:req|request|msg|call|run|trace|span)[_-][A-Za-z0-9]{8,}\b",  # request and trace ids
    r"\b1[6-9]\d{8}(?:\d{3})?\b",  # Unix epoch seconds or milliseconds (2020s-2030s)
)
DEFAULT_PATTERN_NAMES = ("iso_datetime", "date", "clock_time", "uuid", "request_id", "epoch")
# Values that change on every call: relocated by default from a session's first call. A date
# alone may well stay put for a session: it is relocated once the autopilot sees it change.
PER_CALL_KINDS = frozenset({"iso_datetime", "clock_time", "uuid", "request_id", "epoch"})
PLACEHOLDER = "{{volatile:%d}}"
KEEP_PLACEHOLDER = r"(?P<lantern_placeholder>\{\{volatile:\d+\}\})"
# the tail opens with this line and runs to the end of its block: no closing tag, whose five
# tokens every relocating call would pay uncached
BLOCK_OPEN = "<volatile-context>"
NOW_CONTEXT_CHARS = 24  # the context around a frozen place in the line naming its value
LEARNED = "learned"  # the kind of a place the autopilot learnt (cachekeys/volatile_learn.py)


@dataclass(frozen=True, slots=True)
class Scan:
    """A text cut around its volatile values: pieces[0] v0 pieces[1] v1 ... pieces[-1]."""

    pieces: tuple[str, ...]
    values: tuple[tuple[str, str, int], ...]  # (value, kind, the alternative that matched)


class ScanMemo:
    """Scans by text, bounded by entries and characters (a bound, as the other memos). One per
    matcher and tenant: the texts are the tenant's own, read back only for the same tenant."""

    def __init__(self, max_entries: int = 2048, max_chars: int = 4_000_000) -> None:
        self._scans: dict[str, Scan | None] = {}
        self._chars = 0
        self._max_entries = max_entries
        self._max_chars = max_chars
        # schemas seen to hold no value, by identity (the entry holds the object, so its id is
        # not reused): the canonical-schema memo hands out the same objects call after call
        self._clean: dict[tuple[int, object], JSON] = {}

    def is_clean(self, schema: JSON, description: object = None) -> bool:
        """`schema` (and the tool's `description` with it) seen before holding no value."""
        return self._clean.get((id(schema), description), self) is schema

    def mark_clean(self, schema: JSON, description: object = None) -> None:
        if len(self._clean) >= self._max_entries:
            self._clean.clear()
        self._clean[(id(schema), description)] = schema

    def get(self, text: str) -> Scan | None | bool:
        """The memoised scan (None: no value in it), or False when the text is not known."""
        return self._scans.get(text, False)

    def put(self, text: str, scan: Scan | None) -> None:
        if len(self._scans) >= self._max_entries or self._chars + len(text) > self._max_chars:
            self._scans.clear()
            self._chars = 0
        self._scans[text] = scan
        self._chars += len(text)


@dataclass(frozen=True, slots=True)
class VolatileMatcher:
    """One compiled alternation: kept placeholders, then the learnt places, the tenant's
    patterns, and the built-in ones (all, or only `kinds`). `kinds[i]` names alternative i;
    `frozen[i]`, when given, is the value a learnt place keeps in place (see `Relocator`)."""

    pattern: re.Pattern[str]
    kinds: tuple[str, ...] = ()
    memo: ScanMemo = field(default_factory=ScanMemo, compare=False)
    frozen: Mapping[int, str] = field(default_factory=dict, compare=False)

    @classmethod
    def build(
        cls,
        tenant_patterns: Iterable[str] = (),
        use_defaults: bool = True,
        default_kinds: frozenset[str] | None = None,
        learned: Iterable[str] = (),
        frozen: Mapping[str, str] | None = None,
    ) -> VolatileMatcher:
        """`default_kinds` None: every built-in pattern; else only those kinds. `frozen`: learnt
        pattern -> the value kept in its place (the session that learnt it)."""
        named = [(LEARNED, p) for p in learned]
        kept = {i: frozen[p] for i, (_, p) in enumerate(named) if frozen and p in frozen}
        named += [(f"tenant[{i}]", p) for i, p in enumerate(tenant_patterns)]
        if use_defaults:
            named += [
                (name, p)
                for name, p in zip(DEFAULT_PATTERN_NAMES, DEFAULT_VOLATILE_PATTERNS, strict=True)
                if default_kinds is None or name in default_kinds
            ]
        # an existing placeholder is matched first and kept, so a broad tenant pattern (\d+)
        # never rewrites one: relocation stays idempotent
        alternatives = [KEEP_PLACEHOLDER]
        alternatives += [f"(?P<lantern_v{i}>{p})" for i, (_, p) in enumerate(named)]
        kinds = tuple(name for name, _ in named)
        return cls(re.compile("|".join(alternatives)), kinds, ScanMemo(), kept)

    @classmethod
    def per_call(
        cls,
        tenant_patterns: Iterable[str] = (),
        learned: Iterable[str] = (),
        frozen: Mapping[str, str] | None = None,
    ) -> VolatileMatcher:
        """The default: the tenant's patterns are left to the policy; the built-in values that
        change on every call, and the places learnt, are relocated."""
        del tenant_patterns  # relocated under `always` or once learnt, not by default
        return cls.build((), True, PER_CALL_KINDS, learned, frozen)

    def scan(self, text: str) -> Scan | None:
        found = self.memo.get(text)
        if found is not False:
            return found  # type: ignore[return-value]
        scan = self._scan(text)
        self.memo.put(text, scan)
        return scan

    def _scan(self, text: str) -> Scan | None:
        pieces, values, start = [], [], 0
        for match in self.pattern.finditer(text):
            value, group = match.group(0), match.lastgroup
            if not value or group is None or group == "lantern_placeholder":
                continue
            pieces.append(text[start : match.start()])
            index = int(group.removeprefix("lantern_v"))
            values.append((value, self.kinds[index], index))
            start = match.end()
        if not values:
            return None
        pieces.append(text[start:])
        return Scan(tuple(pieces), tuple(values))


class Relocator:
    """Replaces volatile values by placeholders, numbering distinct values in order of appearance.

    One instance serves one request: the same value always gets the same placeholder. A frozen
    place (`VolatileMatcher.frozen`) keeps its frozen value in place instead, and the trailing
    block says what that value is now, so the model still reads every value.
    """

    def __init__(self, matcher: VolatileMatcher) -> None:
        self._matcher = matcher
        self._values: dict[str, int] = {}
        self._now: dict[str, None] = {}  # the lines naming a frozen place's current value
        self.kinds: set[str] = set()

    def text(self, text: str) -> str:
        scan = self._matcher.scan(text)
        if scan is None:
            return text
        frozen = self._matcher.frozen
        out = [scan.pieces[0]]
        for i, (value, kind, index) in enumerate(scan.values):
            piece = scan.pieces[i + 1]
            kept = frozen.get(index)
            if kept is not None:
                out += (kept, piece)
                if kept != value:
                    self.kinds.add(kind)
                    self._now[now_line(scan.pieces[i], kept, value, piece)] = None
                continue
            self.kinds.add(kind)
            number = self._values.setdefault(value, len(self._values) + 1)
            out += (PLACEHOLDER % number, piece)
        return "".join(out)

    def schema(self, schema: JSON) -> JSON:
        """Relocate inside `description` strings of a JSON schema only; an unchanged schema
        is returned itself (copy on write)."""
        memo = self._matcher.memo
        if memo.is_clean(schema):
            return schema
        out = self._schema(schema)
        if out is schema and isinstance(schema, dict | list):
            memo.mark_clean(schema)
        return out

    def is_clean_tool(self, schema: JSON, description: object) -> bool:
        """A tool whose schema and description were seen holding no value: one lookup instead
        of a walk (kept: the walk cost ~2 µs a tool on every call)."""
        return self._matcher.memo.is_clean(schema, description)

    def mark_clean_tool(self, schema: JSON, description: object) -> None:
        if isinstance(schema, dict | list):
            self._matcher.memo.mark_clean(schema, description)

    def _schema(self, schema: JSON) -> JSON:
        if isinstance(schema, Mapping):
            out = {
                k: self.text(v) if k == "description" and isinstance(v, str) else self._schema(v)
                for k, v in schema.items()
            }
            return schema if all(out[k] is v for k, v in schema.items()) else out
        if isinstance(schema, list):
            items = [self._schema(item) for item in schema]
            return schema if all(a is b for a, b in zip(items, schema, strict=True)) else items
        return schema

    def block_text(self) -> str | None:
        """The trailing block with every relocated value, or None when nothing moved."""
        if not (self._values or self._now):
            return None
        lines = [f"{PLACEHOLDER % n} = {value}" for value, n in self._values.items()]
        return "\n".join([BLOCK_OPEN, *lines, *self._now])


def now_line(before: str, kept: str, value: str, after: str) -> str:
    """The line telling the model a frozen place's current value, with the place's context
    (up to `NOW_CONTEXT_CHARS` on each side, on its own line of the text)."""
    left = before.rpartition("\n")[2][-NOW_CONTEXT_CHARS:]
    right = after.partition("\n")[0][:NOW_CONTEXT_CHARS]
    return f'in "{left}{kept}{right}", {kept} is now {value}'


def is_volatile_block(text: str) -> bool:
    return text.startswith(BLOCK_OPEN + "\n")
