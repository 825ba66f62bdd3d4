"""Reads tenant policy YAML into `TenantPolicy`, naming file, line and dotted field of every error.

Parses with line marks (yaml.compose), rejects duplicate keys, maps each pydantic error to the
line it came from. Reads files only; keeps no state (hot reload lives in `policies/store.py`).
"""

from __future__ import annotations

import difflib
import hashlib
import types
import typing
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from policies.errors import DOCUMENT_FIELD, PolicyFileError, PolicyIssue
from policies.model import TenantPolicy

Path_ = tuple[str | int, ...]
POLICY_SUFFIX = ".yaml"
MAX_POLICY_BYTES = 1 << 20  # a policy is a few KiB; PyYAML takes seconds per MiB, the lock held
# PyYAML's constructors raise Python's own errors on a scalar they cannot convert: `2026-02-30`
# (ValueError), `!!int x` (ValueError), `!!timestamp x` (AttributeError)
SCALAR_ERRORS = (ValueError, TypeError, AttributeError, OverflowError)


@dataclass(frozen=True, slots=True)
class YamlDocument:
    """Parsed YAML, the line (1-based) of every key and value by path, and duplicate keys found.

    With duplicate keys, `data` holds the last value of each (PyYAML's choice); callers report
    `duplicates` alongside their own checks so one run lists every problem.
    """

    data: Any
    key_lines: Mapping[Path_, int]
    value_lines: Mapping[Path_, int]
    duplicates: tuple[PolicyIssue, ...] = ()

    def line_of(self, path: Path_) -> int:
        return self.key_lines.get(path) or self.value_lines.get(path) or 1

    def resolve(self, loc: Iterable[str | int]) -> Path_:
        """The longest path of `loc` present in the document; skips pydantic's union tags."""
        path: Path_ = ()
        for part in loc:
            candidate = (*path, part if isinstance(part, int) else str(part))
            if candidate in self.value_lines:
                path = candidate
        return path


@dataclass(frozen=True, slots=True)
class LoadedPolicy:
    """A valid policy, where it came from, and the line of each field (`api_keys[0].sha256`)."""

    policy: TenantPolicy
    file: str
    content_sha256: str
    lines: Mapping[str, int]

    def line_of(self, field: str) -> int:
        return self.lines.get(field, 1)


def parse_yaml(text: str, file: str) -> YamlDocument:
    """Parse one YAML document with line marks; raises `PolicyFileError` on syntax errors, and
    on whatever else a document can make PyYAML raise, so one tenant's file never stops the
    others' from loading."""
    try:
        node, data = _compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise PolicyFileError(
            [PolicyIssue(file, line, DOCUMENT_FIELD, f"invalid YAML: {_yaml_problem(exc)}")]
        ) from exc
    except yaml.YAMLError as exc:  # a character YAML refuses (NUL, ...): raised by the reader
        raise PolicyFileError(
            [PolicyIssue(file, 1, DOCUMENT_FIELD, f"invalid YAML: {exc}")]
        ) from exc
    except SCALAR_ERRORS as exc:
        reason = f"invalid YAML: a value cannot be read ({type(exc).__name__}: {exc})"
        raise PolicyFileError([PolicyIssue(file, 1, DOCUMENT_FIELD, reason)]) from exc
    except RecursionError as exc:
        reason = "invalid YAML: nested too deeply"
        raise PolicyFileError([PolicyIssue(file, 1, DOCUMENT_FIELD, reason)]) from exc
    key_lines: dict[Path_, int] = {}
    value_lines: dict[Path_, int] = {}
    issues: list[PolicyIssue] = []
    if node is not None:
        _walk(node, (), key_lines, value_lines, issues, file, set())
    return YamlDocument(data, key_lines, value_lines, tuple(issues))


def _compose(text: str) -> tuple[yaml.Node | None, Any]:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        return node, loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    parts = [part for part in (exc.context, exc.problem) if part]
    return ", ".join(parts) if parts else str(exc)


def _walk(
    node: yaml.Node,
    path: Path_,
    key_lines: dict[Path_, int],
    value_lines: dict[Path_, int],
    issues: list[PolicyIssue],
    file: str,
    walked: set[int],
) -> None:
    """Records the line of every key and value once per node: an alias is not walked again,
    so a document of nested aliases (a "billion laughs") costs its size, not its expansion."""
    value_lines[path] = node.start_mark.line + 1
    if id(node) in walked:  # an alias: its anchor's lines are recorded under the anchor's path
        return
    walked.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.value == "<<":
                continue
            child = (*path, key_node.value)
            line = key_node.start_mark.line + 1
            if child in key_lines:
                reason = f"duplicate key '{key_node.value}' (first at line {key_lines[child]})"
                issues.append(PolicyIssue(file, line, _dotted(child), reason))
                continue
            key_lines[child] = line
            _walk(value_node, child, key_lines, value_lines, issues, file, walked)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), key_lines, value_lines, issues, file, walked)


def _dotted(path: Iterable[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or DOCUMENT_FIELD


def issues_from_validation(
    exc: ValidationError, doc: YamlDocument, file: str, model: type[BaseModel]
) -> list[PolicyIssue]:
    """One issue per pydantic error, placed on the line of the key (or item) it concerns."""
    return issues_from_errors(exc.errors(), doc, file, model)


def issues_from_errors(
    errors: Iterable[ErrorDetails], doc: YamlDocument, file: str, model: type[BaseModel]
) -> list[PolicyIssue]:
    errors = list(errors)
    deeper = {e["loc"][:n] for e in errors for n in range(len(e["loc"]))}
    issues = []
    for error in errors:
        loc, kind = error["loc"], error["type"]
        if kind == "too_short" and loc in deeper:
            continue  # pydantic counts only the valid items; the invalid ones are reported
        names_key = kind in ("missing", "extra_forbidden") and bool(loc)
        path = doc.resolve(loc[:-1] if names_key else loc)
        field_path: Path_ = (*path, str(loc[-1])) if names_key else path
        line = doc.line_of(field_path if kind == "extra_forbidden" else path)
        reason = _reason(error, model)
        issues.append(PolicyIssue(file, line, _dotted(field_path), reason))
    return issues


def _reason(error: ErrorDetails, model: type[BaseModel]) -> str:
    kind, loc = error["type"], error["loc"]
    if kind == "value_error" and "error" in error.get("ctx", {}):
        return str(error["ctx"]["error"])  # our own validators' text, without pydantic's prefix
    if kind == "missing":
        return "missing required key"
    if kind == "tuple_type":
        return "Input should be a valid list"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return "Input should be a mapping"
    if kind != "extra_forbidden":
        return error["msg"]
    allowed = _keys_at(model, loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown key ({hint}allowed: {', '.join(allowed)})"


def _keys_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """The keys accepted at pydantic location `loc`; a union's tag picks its member model."""
    candidates: list[type[BaseModel]] = [model]
    for part in loc:
        if isinstance(part, int):
            continue
        owners = [m for m in candidates if part in m.model_fields]
        if owners:
            candidates = _models_in(owners[0].model_fields[part].annotation)
        else:
            candidates = [m for m in candidates if _has_literal(m, part)]
        if not candidates:
            return []
    return sorted(candidates[0].model_fields) if len(candidates) == 1 else []


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """Models inside an annotation: `X`, `tuple[X, ...]`, `X | None`, `Annotated[A | B, ...]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) not in _CONTAINERS:
        return []
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found.extend(m for m in _models_in(arg) if m not in found)
    return found


_CONTAINERS = (tuple, list, dict, types.UnionType, typing.Union, typing.Annotated)


def _has_literal(model: type[BaseModel], value: str) -> bool:
    return any(
        typing.get_origin(f.annotation) is typing.Literal and value in typing.get_args(f.annotation)
        for f in model.model_fields.values()
    )


def load_policy_text(text: str, file: str, *, expected_tenant: str | None = None) -> LoadedPolicy:
    """Validate one policy document; raise `PolicyFileError` listing every issue found."""
    doc = parse_yaml(text, file)
    if not isinstance(doc.data, dict):
        if doc.duplicates:
            raise PolicyFileError(doc.duplicates)
        got = "an empty file" if doc.data is None else type(doc.data).__name__
        reason = f"expected a mapping with at least `tenant:`, got {got}"
        raise PolicyFileError([PolicyIssue(file, 1, DOCUMENT_FIELD, reason)])
    issues: list[PolicyIssue] = list(doc.duplicates)
    tenant = doc.data.get("tenant")
    if expected_tenant is not None and isinstance(tenant, str) and tenant != expected_tenant:
        reason = f"tenant '{tenant}' does not match the file name (expected '{expected_tenant}')"
        issues.append(PolicyIssue(file, doc.line_of(("tenant",)), "tenant", reason))
    policy: TenantPolicy | None = None
    try:
        policy = TenantPolicy.model_validate(doc.data)
    except ValidationError as exc:
        issues.extend(issues_from_validation(exc, doc, file, TenantPolicy))
    if policy is not None:
        issues.extend(_duplicates(policy, doc, file))
    if issues or policy is None:
        raise PolicyFileError(issues)
    lines = {_dotted(path): doc.line_of(path) for path in doc.value_lines if path}
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return LoadedPolicy(policy, file, digest, MappingProxyType(lines))


def _duplicates(policy: TenantPolicy, doc: YamlDocument, file: str) -> list[PolicyIssue]:
    """Key ids, key hashes, tool names and granted MCP servers are each unique in a tenant."""
    issues = []
    columns: list[tuple[str, str, list[str]]] = [
        ("api_keys", "id", [k.id for k in policy.api_keys]),
        ("api_keys", "sha256", [k.sha256 for k in policy.api_keys]),
        ("tools", "name", [t.name for t in policy.tools]),
        ("mcp_servers", "name", [g.name for g in policy.mcp_servers]),
    ]
    for section, attr, values in columns:
        first: dict[str, int] = {}
        for index, value in enumerate(values):
            if value not in first:
                first[value] = index
                continue
            path = (section, index, attr)
            reason = f"duplicate {attr} (also in {section}[{first[value]}])"
            issues.append(PolicyIssue(file, doc.line_of(path), _dotted(path), reason))
    return issues


def load_policy_file(path: Path) -> LoadedPolicy:
    """Read and validate `path`; its name must be `<tenant>.yaml`."""
    try:
        data = read_policy_bytes(path)
    except OSError as exc:
        raise PolicyFileError(
            [PolicyIssue(str(path), 1, DOCUMENT_FIELD, f"cannot read: {exc}")]
        ) from exc
    return load_policy_bytes(data, path)


def read_policy_bytes(path: Path) -> bytes:
    """The file's bytes, at most one past `MAX_POLICY_BYTES` (enough for the loader to refuse
    it): a huge file is never read whole."""
    with path.open("rb") as handle:
        return handle.read(MAX_POLICY_BYTES + 1)


def load_policy_bytes(data: bytes, path: Path) -> LoadedPolicy:
    """Validate the bytes read from `path` (UTF-8 YAML named `<tenant>.yaml`)."""
    file = str(path)
    if path.suffix != POLICY_SUFFIX:
        reason = f"a policy file name must end in {POLICY_SUFFIX}"
        raise PolicyFileError([PolicyIssue(file, 1, DOCUMENT_FIELD, reason)])
    if len(data) > MAX_POLICY_BYTES:
        reason = f"over {MAX_POLICY_BYTES} bytes: a policy file is at most 1 MiB"
        raise PolicyFileError([PolicyIssue(file, 1, DOCUMENT_FIELD, reason)])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        reason = f"not UTF-8 text (byte {exc.start})"
        raise PolicyFileError([PolicyIssue(file, 1, DOCUMENT_FIELD, reason)]) from exc
    return load_policy_text(text, file, expected_tenant=path.stem)


def key_conflicts(candidate: LoadedPolicy, owners: Mapping[str, LoadedPolicy]) -> list[PolicyIssue]:
    """Issues for candidate keys whose hash another tenant already holds (`owners`: hash → policy)."""
    issues = []
    for index, entry in enumerate(candidate.policy.api_keys):
        owner = owners.get(entry.sha256)
        if owner is None or owner.policy.tenant == candidate.policy.tenant:
            continue
        owner_index = [k.sha256 for k in owner.policy.api_keys].index(entry.sha256)
        owner_line = owner.line_of(f"api_keys[{owner_index}].sha256")
        reason = (
            f"key hash already used by tenant '{owner.policy.tenant}' ({owner.file}:{owner_line})"
        )
        field = f"api_keys[{index}].sha256"
        issues.append(PolicyIssue(candidate.file, candidate.line_of(field), field, reason))
    return issues


def reference_issues(
    loaded: LoadedPolicy,
    model_names: Collection[str],
    backend_names: Collection[str],
    mcp_server_names: Collection[str] | None = None,
) -> list[PolicyIssue]:
    """Issues for `models` / `backends` entries (and `mcp_servers` grants, when the declared
    servers are given) that name nothing in the server config."""
    issues = []
    lists: list[tuple[str, Iterable[str], Collection[str], str]] = [
        ("models", loaded.policy.models, model_names, "model"),
        ("backends", loaded.policy.backends or (), backend_names, "backend"),
    ]
    if mcp_server_names is not None:
        grants = (grant.name for grant in loaded.policy.mcp_servers)
        lists.append(("mcp_servers", grants, mcp_server_names, "MCP server"))
    for section, names, known, what in lists:
        for index, name in enumerate(names):
            if name not in known:
                field = f"{section}[{index}]"
                reason = f"no {what} named '{name}' in the server config"
                issues.append(PolicyIssue(loaded.file, loaded.line_of(field), field, reason))
    return issues


def policy_files(directory: Path) -> list[Path]:
    """The policy files of a directory: `*.yaml`, not hidden, sorted by name."""
    return sorted(
        p for p in directory.glob(f"*{POLICY_SUFFIX}") if p.is_file() and not p.name.startswith(".")
    )


def check_paths(paths: Iterable[Path]) -> tuple[list[LoadedPolicy], list[PolicyIssue]]:
    """Validate files and directories together, key hashes unique across all of them."""
    loaded: list[LoadedPolicy] = []
    issues: list[PolicyIssue] = []
    owners: dict[str, LoadedPolicy] = {}
    for path in paths:
        if not path.exists():
            issues.append(PolicyIssue(str(path), 1, DOCUMENT_FIELD, "no such file or directory"))
            continue
        files = policy_files(path) if path.is_dir() else [path]
        for file in files:
            try:
                candidate = load_policy_file(file)
            except PolicyFileError as exc:
                issues.extend(exc.issues)
                continue
            conflicts = key_conflicts(candidate, owners)
            issues.extend(conflicts)
            if not conflicts:
                loaded.append(candidate)
                owners.update((k.sha256, candidate) for k in candidate.policy.api_keys)
    return loaded, issues
