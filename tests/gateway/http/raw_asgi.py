"""A request's ASGI scope as uvicorn builds it, for the tests that drive the app themselves
(their own `receive` and `send`: a client that stays, leaves, or is held at a chosen moment)."""

from __future__ import annotations

from typing import Any


def http_scope(method: str, path: str, key: str, body: bytes = b"") -> dict[str, Any]:
    """A request of the caller holding `key`; a JSON body's type and length when there is one."""
    headers = [(b"authorization", f"Bearer {key}".encode())]
    if body:
        headers += [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }
