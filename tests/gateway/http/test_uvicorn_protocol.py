"""`DeadlineProtocol` (gateway/http/server.py) subclasses uvicorn's httptools protocol, replaces
its `on_response_complete` (uvicorn's, with the keep-alive timer made a deadline of the watch)
and calls uvicorn methods that are not its public API. pyproject.toml pins uvicorn to the
release this was written against; these tests fail when the installed protocol is not that
release's, so whoever moves the pin reviews the copy first (and records the new digest)."""

from __future__ import annotations

import hashlib
import inspect

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.http.server import DeadlineProtocol

# sha256 of `inspect.getsource(HttpToolsProtocol)` in uvicorn 0.55.0
REVIEWED = "ec7f438cf5cec43e89f2636c4521d2937acfcbd11db4cfdc627dad3b9962ff3f"


def test_the_protocol_subclassed_is_the_one_reviewed() -> None:
    source = inspect.getsource(HttpToolsProtocol)
    assert hashlib.sha256(source.encode()).hexdigest() == REVIEWED, (
        "uvicorn's HttpToolsProtocol changed: compare its on_response_complete with "
        "DeadlineProtocol's copy, check the private members it uses, then update REVIEWED"
    )


def test_the_private_members_used_exist() -> None:
    for name in ("_unset_keepalive_if_required", "_start_asgi_task", "on_response_complete"):
        assert callable(getattr(HttpToolsProtocol, name))
    source = inspect.getsource(HttpToolsProtocol.__init__)
    for attribute in ("self.pipeline", "self.flow", "self.server_state", "self.cycle"):
        assert attribute in source
    assert DeadlineProtocol.on_response_complete is not HttpToolsProtocol.on_response_complete
