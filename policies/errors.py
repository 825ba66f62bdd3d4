"""Typed errors of the policies package: what is wrong, in which file, on which line, in which field.

Holds data only; formatting for people is `str(issue)` (`file:line: field: reason`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

DOCUMENT_FIELD = "(document)"  # the field name of an issue that belongs to no single key


@dataclass(frozen=True, slots=True, order=True)
class PolicyIssue:
    """One problem in one file; `line` is 1-based (0: no line), `field` a dotted path (`limits.x`)."""

    file: str
    line: int
    field: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field}: {self.reason}"


class PolicyError(Exception):
    """Base of every error raised by `policies/`."""


class PolicyFileError(PolicyError):
    """A policy file that cannot be used; carries every issue found in it (at least one)."""

    def __init__(self, issues: Iterable[PolicyIssue]) -> None:
        self.issues: tuple[PolicyIssue, ...] = tuple(sorted(issues))
        if not self.issues:
            raise ValueError("PolicyFileError needs at least one issue")
        super().__init__("\n".join(str(issue) for issue in self.issues))

    @property
    def file(self) -> str:
        return self.issues[0].file

    @property
    def line(self) -> int:
        return self.issues[0].line

    @property
    def field(self) -> str:
        return self.issues[0].field

    @property
    def reason(self) -> str:
        return self.issues[0].reason
