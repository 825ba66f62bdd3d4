"""What the policy store checks beyond one file, and where its last good policies survive a
restart: names checked against the server's configuration, and an archive protocol (the gateway
implements it on disk; this package never writes files).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from policies.errors import PolicyFileError
from policies.loader import LoadedPolicy, load_policy_bytes, reference_issues


class PolicyArchive(Protocol):
    """The bytes of each tenant's last accepted policy file."""

    def save(self, tenant: str, data: bytes) -> None: ...

    def load_all(self) -> Mapping[str, bytes]: ...


@dataclass(frozen=True, slots=True)
class KnownNames:
    """The model and backend names of the server configuration."""

    models: Collection[str]
    backends: Collection[str]


def checked(
    outcome: LoadedPolicy | PolicyFileError, known: KnownNames | None
) -> LoadedPolicy | PolicyFileError:
    """A valid policy that names an unknown model or backend becomes an error (file:line)."""
    if known is None or isinstance(outcome, PolicyFileError):
        return outcome
    issues = reference_issues(outcome, known.models, known.backends)
    return PolicyFileError(issues) if issues else outcome


def archived_policies(
    archive: PolicyArchive, policy_dir: Path, known: KnownNames | None
) -> dict[str, LoadedPolicy]:
    """The archive's policies that are still valid, as if read from `policy_dir`."""
    found: dict[str, LoadedPolicy] = {}
    for tenant, data in archive.load_all().items():
        try:
            outcome = checked(load_policy_bytes(data, policy_dir / f"{tenant}.yaml"), known)
        except PolicyFileError:
            continue
        if isinstance(outcome, LoadedPolicy):
            found[outcome.policy.tenant] = outcome
    return found
