"""What a route that reads the database answers while the database is down: a 503 with
`retry-after`, in the error shape of the door the path belongs to, instead of a 500.

The call path never gets here (the ledger spools, keys are cached); the admin reports, the
keys API and the console read PostgreSQL directly and would otherwise fail with a bare 500.
"""

from __future__ import annotations

import logging

import orjson
from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import Request
from starlette.responses import Response

from gateway.http.compat_routes import door_of
from gateway.http.error_shapes import error_body

log = logging.getLogger("lantern.http")

RETRY_AFTER_S = 5


async def database_unavailable(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SQLAlchemyError)
    log.warning("%s %s: database error %s", request.method, request.url.path, type(exc).__name__)
    message = (
        f"{request.method} {request.url.path}: the ledger database cannot be read "
        f"({type(exc).__name__}); retry in {RETRY_AFTER_S} s"
    )
    body = error_body(
        door_of(request.url.path), "service_unavailable", "api_error", message, "database", None
    )
    headers = {"retry-after": str(RETRY_AFTER_S)}
    return Response(orjson.dumps(body), 503, headers, "application/json")
