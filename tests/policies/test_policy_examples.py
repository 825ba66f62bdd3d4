"""The shipped reference policy stays valid and documents every key the model accepts."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from policies.loader import check_paths, parse_yaml
from policies.model import TenantPolicy

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "policies" / "acme.yaml"


def test_reference_policy_is_valid() -> None:
    loaded, issues = check_paths([EXAMPLE])
    assert issues == []
    (item,) = loaded
    assert (item.policy.tenant, [k.id for k in item.policy.api_keys]) == ("acme", ["prod", "ci"])


def model_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Dotted paths of every key of the policy model, entering nested sections."""
    paths: set[str] = set()
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.add(path)
        nested = field.annotation
        args = getattr(nested, "__args__", ())
        for candidate in (nested, *args):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                paths |= model_paths(candidate, f"{path}.")
    return paths


def test_reference_policy_mentions_every_key() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    doc = parse_yaml(text, str(EXAMPLE))
    present = {".".join(str(p) for p in path if not isinstance(p, int)) for path in doc.key_lines}
    missing = sorted(
        p for p in model_paths(TenantPolicy) if p not in present and p.split(".")[-1] not in text
    )
    assert missing == [], f"examples/policies/acme.yaml and docs/policy.md lack: {missing}"
