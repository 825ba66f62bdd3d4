"""API keys: generation (`lt-` + 40 URL-safe characters), stored form (sha256), YAML entries.

Randomness is injected; nothing here touches files or the environment.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from policies.model import hash_api_key

KEY_PREFIX = "lt-"
KEY_BODY_CHARS = 40
RandomBytes = Callable[[int], bytes]


@dataclass(frozen=True, slots=True)
class NewKey:
    """A freshly generated key: `key` is shown once; only `sha256` is stored in the policy."""

    key_id: str
    key: str
    sha256: str

    def yaml_entry(self) -> str:
        """The line to paste under `api_keys:` in the tenant's policy file."""
        return f'- {{id: {self.key_id}, sha256: "{self.sha256}"}}'


def generate_key(random_bytes: RandomBytes = secrets.token_bytes) -> str:
    # 30 random bytes encode to exactly 40 URL-safe base64 characters (240 bits), no padding
    body = base64.urlsafe_b64encode(random_bytes(30)).decode("ascii")
    return KEY_PREFIX + body


def generate_key_id(random_bytes: RandomBytes = secrets.token_bytes) -> str:
    return "k" + random_bytes(4).hex()


def new_key(key_id: str | None = None, random_bytes: RandomBytes = secrets.token_bytes) -> NewKey:
    key = generate_key(random_bytes)
    return NewKey(key_id or generate_key_id(random_bytes), key, hash_api_key(key))


DEMO_TENANT = "demo"


def seed_demo_tenant(
    policy_dir: Path, random_bytes: RandomBytes = secrets.token_bytes
) -> NewKey | None:
    """Write `policy_dir/demo.yaml` with a fresh key unless it exists; return the key if new."""
    path = policy_dir / f"{DEMO_TENANT}.yaml"
    if path.exists():
        return None
    policy_dir.mkdir(parents=True, exist_ok=True)
    key = new_key("demo", random_bytes)
    text = (
        "# Demo tenant written by `lantern serve --demo`; its key was printed once at creation.\n"
        f"tenant: {DEMO_TENANT}\n"
        "name: Demo tenant\n"
        "api_keys:\n"
        f"  {key.yaml_entry()}\n"
        "limits:\n"
        "  tokens_per_minute: 200000\n"
        "  requests_per_minute: 120\n"
        "  concurrent_requests: 8\n"
        "  max_prompt_tokens: 8000\n"
        "  max_output_tokens: 1024\n"
    )
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)  # atomic: the policy poller never sees a half-written file
    return key
