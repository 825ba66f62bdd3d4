"""`lantern serve --demo`: the seeded demo tenant's key and the admin token, each made once and
kept 0600 in var_dir, and how to call the gateway with them."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from gateway.keys import seed_demo_tenant
from gateway.settings import Settings, demo_settings


def announce_demo(settings: Settings, *, host: str | None, port: int | None) -> Settings:
    """Print the demo key and how to call; without an admin token in the settings, make one
    and return the settings that carry it."""
    _announce_demo_key(settings)
    if settings.admin_token is not None:
        return settings
    token = _demo_admin_token(settings.var_dir)
    settings = demo_settings(host=host, port=port, admin_token=token)
    url = f"http://{settings.host}:{settings.port}"
    print(f"admin token: {token}   (stored in {settings.var_dir / 'admin.token'})")
    print(f"console: {url}/console   (log in with the admin token; /admin/* takes it as Bearer)")
    return settings


def _demo_admin_token(var_dir: Path) -> str:
    """The demo's admin token: `var_dir/admin.token` (0600), made once."""
    path = var_dir / "admin.token"
    if not path.exists():
        var_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write("lt-admin-" + secrets.token_urlsafe(24) + "\n")
    return path.read_text(encoding="ascii").strip()


def _announce_demo_key(settings: Settings) -> None:
    """Seed the demo tenant once; keep its key in var_dir/demo.key (0600) so every demo run
    can print how to call the gateway."""
    key_file = settings.var_dir / "demo.key"
    created = seed_demo_tenant(settings.policy_dir)
    if created is not None:
        settings.var_dir.mkdir(parents=True, exist_ok=True)
        # created 0600 from the start: never readable by others, not even for a moment
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(created.key + "\n")
    if not key_file.exists():
        print(f"demo tenant: {settings.policy_dir / 'demo.yaml'} exists but {key_file} is gone;")
        print("  make a key with `lantern keys create --tenant demo` and add it to that file")
        return
    key = key_file.read_text(encoding="ascii").strip()
    url = f"http://{settings.host}:{settings.port}"
    print(f"Lantern (demo) will listen on {url} once the bundled engine has loaded SmolLM2.")
    print(f"demo API key: {key}   (stored in {key_file})")
    print("try it:")
    print(f"  curl -s {url}/v1/chat/completions -H 'authorization: Bearer {key}' \\")
    print("    -H 'content-type: application/json' \\")
    print(
        '    -d \'{"model": "smollm2", "max_tokens": 40, '
        '"messages": [{"role": "user", "content": "What is a lantern?"}]}\''
    )
