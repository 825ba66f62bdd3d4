"""`TenantSessionManager` (gateway/mcp/sessions.py) counts a tenant's sessions in two methods of
the SDK's session manager that are not its public API: `_admit_session` (every session admitted,
under the session lock; the transport it makes gets the manager's `event_store`, which the
subclass sets to the session's own for that call) and `_discard_session` (every way a session
goes); and `_serve_opening_request` (the request that opens a session, whose scope the subclass
stamps with the new session's id for its span). pyproject.toml pins the mcp release this was written against; this test fails when the
installed manager is not that release's, so whoever moves the pin checks both are still where
every session starts and ends (then records the new digest)."""

from __future__ import annotations

import hashlib
import inspect

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from gateway.mcp.sessions import TenantSessionManager

# sha256 of `inspect.getsource(StreamableHTTPSessionManager)` in mcp 2.3.0
REVIEWED = "eb8f3541d2603e72ea3d5ca0f2b613b61b63b404a8712965dbc32dde8f5e07f0"


def test_the_manager_subclassed_is_the_one_reviewed() -> None:
    source = inspect.getsource(StreamableHTTPSessionManager)
    assert hashlib.sha256(source.encode()).hexdigest() == REVIEWED, (
        "the SDK's StreamableHTTPSessionManager changed: check that every session is still "
        "admitted in _admit_session (its transport given self.event_store) and discarded through "
        "_discard_session, then update REVIEWED"
    )


def test_the_methods_counted_in_are_the_sdks() -> None:
    for name in ("_admit_session", "_discard_session", "_serve_opening_request"):
        assert name in vars(StreamableHTTPSessionManager)
        assert name in vars(TenantSessionManager)
