"""The console's routes: login and logout, one GET per page, and the key forms (issue, revoke).

Every page but the login needs a valid console session (else a redirect to the login form);
every form, logout included, needs the cookie's form token, and is read (up to
`FORM_MAX_BYTES`) only once the session is checked. Logins are throttled per client address.
Every reply forbids framing. Page data is gathered in a thread (pages.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from urllib.parse import parse_qs

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from gateway.apikeys.records import KeyIdConflict, KeyNotFound, KeyRequestInvalid
from gateway.errors import BodyTooLarge, ClientGone
from gateway.http.admin_keys import (
    MAX_KEYS_PAGE,
    KeyIssueBody,
    check_key_request,
    first_problem,
)
from gateway.http.console import pages
from gateway.http.console.login import COOKIE, ConsoleSessions
from gateway.http.console.throttle import LoginThrottle
from gateway.http.request_body import read_body
from gateway.reports.cost import InvalidReportQuery, parse_period
from gateway.reports.spend import SPEND_DIMENSIONS

CONSOLE_ACTOR = "console"
FORM_MAX_BYTES = 64 * 1024  # the console's forms carry a few short fields
MAX_PAGE_DIGITS = 9  # past the last page of any ledger (top_sessions caps the offset anyway)
View = Callable[[Request], Awaitable[Response]]
NAV = (("spend", "Spend"), ("budgets", "Budgets"), ("cache", "Cache"), ("sessions", "Sessions"),
       ("breakeven", "Break-even"), ("tenants", "Tenants"), ("keys", "Keys"))  # fmt: skip
HARDENING = {
    "x-frame-options": "DENY",
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


@dataclass(frozen=True, slots=True)
class Console:
    data: pages.ConsoleData
    auth: ConsoleSessions
    throttle: LoginThrottle
    model_names: list[str]
    clock: Callable[[], datetime]
    secure_cookie: bool = False


def _templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )


class ConsoleRoutes:
    """The handlers; `build_console_router` mounts them."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.env = _templates()

    def html(self, name: str, status: int = 200, **context: object) -> HTMLResponse:
        body = self.env.get_template(name).render(nav=NAV, **context)
        return HTMLResponse(body, status, headers={"cache-control": "no-store"})

    def guarded(self, view: View) -> View:
        """The view for a logged-in browser; else a redirect to the login form."""

        async def handler(request: Request) -> Response:
            if not await asyncio.to_thread(self.console.auth.is_valid, request.cookies):
                return RedirectResponse("/console/login", 303)
            try:
                return await view(request)
            except (BodyTooLarge, ClientGone):
                return _too_large()
            except InvalidReportQuery as exc:
                token = self.console.auth.form_token(request.cookies)
                return self.html("page.html.j2", 400, page=None, error=str(exc), current="",
                                 form_token=token)  # fmt: skip

        return handler

    async def login_form(self, request: Request) -> Response:
        return self.html("login.html.j2", error=None, enabled=self.console.auth.is_enabled)

    async def login(self, request: Request) -> Response:
        auth, address = self.console.auth, request.client.host if request.client else ""
        retry_after_s = self.console.throttle.retry_after_s(address)
        if retry_after_s is not None:
            refused = self.html("login.html.j2", 429, error="too many wrong tokens: try later",
                                enabled=auth.is_enabled)  # fmt: skip
            refused.headers["retry-after"] = str(retry_after_s)
            return refused
        try:
            form = await _form(request)
        except (BodyTooLarge, ClientGone):
            return _too_large()
        cookie = await asyncio.to_thread(auth.login, form.get("token", ""))
        if cookie is None:
            self.console.throttle.failed(address)
            return self.html("login.html.j2", 401, error="wrong admin token",
                             enabled=auth.is_enabled)  # fmt: skip
        self.console.throttle.succeeded(address)
        reply = RedirectResponse("/console/spend", 303)
        reply.set_cookie(COOKIE, cookie, max_age=auth.ttl_s, httponly=True, samesite="strict",
                         secure=self.console.secure_cookie, path="/console")  # fmt: skip
        return reply

    async def logout(self, request: Request) -> Response:
        """Ends the session server-side (POST with the form token: no other site can)."""
        form = await _form(request)
        if not self.console.auth.is_form_token(request.cookies, form.get("form_token", "")):
            return Response("stale form: reload the page", 403)
        await asyncio.to_thread(self.console.auth.logout, request.cookies)
        reply = RedirectResponse("/console/login", 303)
        reply.delete_cookie(COOKIE, path="/console")
        return reply

    async def home(self, request: Request) -> Response:
        return RedirectResponse("/console/spend", 303)

    async def page(self, request: Request) -> Response:
        name = request.path_params["name"]
        found = await asyncio.to_thread(_page, self.console, name, request)
        status = 200 if found is not None else 404
        return self.html("page.html.j2", status, page=found, current=name, error=None,
                         dimensions=SPEND_DIMENSIONS,
                         form_token=self.console.auth.form_token(request.cookies))  # fmt: skip

    async def keys(
        self, request: Request, issued: dict[str, str] | None = None, error: str | None = None
    ) -> Response:
        records = self.console.data.records
        listed, more = await asyncio.to_thread(records.page, None, None, MAX_KEYS_PAGE)
        audit = await asyncio.to_thread(records.audit_log, 20)
        tenants = [e.tenant for e in self.console.data.policies.snapshot().tenants]
        token = self.console.auth.form_token(request.cookies)
        return self.html("keys.html.j2", 400 if error else 200, keys=listed, audit=audit,
                         tenants=tenants, issued=issued, error=error, form_token=token,
                         current="keys", more=more, max_keys=MAX_KEYS_PAGE,
                         now=self.console.clock())  # fmt: skip

    async def issue(self, request: Request) -> Response:
        form = await _form(request)
        if not self.console.auth.is_form_token(request.cookies, form.get("form_token", "")):
            return Response("stale form: reload the page", 403)
        data = self.console.data
        try:
            wanted = check_key_request(
                _issue_body(form), data.policies.get, self.console.model_names
            )
            key, secret = await asyncio.to_thread(data.records.issue, wanted, CONSOLE_ACTOR)
        except ValidationError as exc:  # pydantic's first line names only the model
            return await self.keys(request, error=first_problem(exc))
        except (KeyRequestInvalid, ValueError) as exc:
            return await self.keys(request, error=str(exc).splitlines()[0])
        return await self.keys(
            request, issued={"id": key.key_id, "tenant": key.tenant, "key": secret}
        )

    async def revoke(self, request: Request) -> Response:
        form = await _form(request)
        if not self.console.auth.is_form_token(request.cookies, form.get("form_token", "")):
            return Response("stale form: reload the page", 403)
        key_id, tenant = request.path_params["key_id"], form.get("tenant") or None
        records = self.console.data.records
        try:
            await asyncio.to_thread(records.revoke, key_id, CONSOLE_ACTOR, tenant)
        except (KeyNotFound, KeyIdConflict) as exc:
            return await self.keys(request, error=str(exc))
        return RedirectResponse("/console/keys", 303)


def build_console_router(console: Console) -> APIRouter:
    routes = ConsoleRoutes(console)
    router = APIRouter(include_in_schema=False)

    def add(path: str, view: View, methods: list[str]) -> None:
        router.add_api_route(path, _hardened(view), methods=methods)

    add("/console/login", routes.login_form, methods=["GET"])
    add("/console/login", routes.login, methods=["POST"])
    add("/console/logout", routes.guarded(routes.logout), methods=["POST"])
    add("/console", routes.guarded(routes.home), methods=["GET"])
    add("/console/keys", routes.guarded(routes.keys), methods=["GET"])
    add("/console/keys", routes.guarded(routes.issue), methods=["POST"])
    add("/console/keys/{key_id}/revoke", routes.guarded(routes.revoke), methods=["POST"])
    add("/console/{name}", routes.guarded(routes.page), methods=["GET"])
    return router


def _hardened(view: View) -> View:
    """`view` whose every reply forbids framing (clickjacking) and sniffing."""

    async def handler(request: Request) -> Response:
        reply = await view(request)
        reply.headers.update(HARDENING)
        return reply

    return handler


def _page(console: Console, name: str, request: Request) -> pages.Page | None:
    q = request.query_params
    now = console.clock()
    data = console.data
    if name in {"budgets", "tenants"}:
        return pages.budgets_page(data, now) if name == "budgets" else pages.tenants_page(data, now)
    since, until = parse_period(q.get("since"), q.get("until"), now)
    if name == "spend":
        dimension = q.get("dimension", "tenant")
        if dimension not in SPEND_DIMENSIONS:
            raise InvalidReportQuery(f"dimension: use {'|'.join(SPEND_DIMENSIONS)}", "dimension")
        return pages.spend_page(data, since, until, dimension)
    if name == "cache":
        return pages.cache_page(data, since, until)
    if name == "sessions":
        return pages.sessions_page(data, since, until, _page_index(q.get("page", "1")))
    if name == "breakeven":
        return pages.breakeven_page(data, since, until)
    return None


def _page_index(page: str) -> int:
    """The 0-based index of `?page=` (1-based), in ASCII digits: `str.isdigit` is also true of
    '²', which `int` refuses."""
    if not (page.isascii() and page.isdigit() and len(page) <= MAX_PAGE_DIGITS):
        raise InvalidReportQuery(
            f"page: a page number from 1 (at most {MAX_PAGE_DIGITS} digits)", "page"
        )
    return max(int(page) - 1, 0)


async def _form(request: Request) -> dict[str, str]:
    """The posted form, read up to `FORM_MAX_BYTES` (BodyTooLarge past it)."""
    body = await read_body(request, FORM_MAX_BYTES)
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}


def _too_large() -> Response:
    return Response(f"form over {FORM_MAX_BYTES} bytes", 413, media_type="text/plain")


def _issue_body(form: dict[str, str]) -> KeyIssueBody:
    """The console form as the admin API's body; empty fields are left out, and an expiry
    without a UTC offset is in UTC (one with an offset keeps it)."""
    models = [m.strip() for m in form.get("models", "").split(",") if m.strip()]
    try:
        budget = Decimal(form["budget_usd"]) if form.get("budget_usd") else None
    except InvalidOperation as exc:
        raise KeyRequestInvalid("budget_usd: a number of dollars, e.g. 25 or 12.50") from exc
    try:
        expires = datetime.fromisoformat(form["expires_at"]) if form.get("expires_at") else None
    except ValueError as exc:
        raise KeyRequestInvalid(
            f"expires_at: a date and time, e.g. 2026-12-31T00:00 ({exc})"
        ) from exc
    return KeyIssueBody(
        tenant=form.get("tenant", ""),
        id=form.get("id") or None,
        models=models or None,
        budget_usd=budget,
        budget_window=(form.get("budget_window") or None) if budget is not None else None,
        expires_at=expires.replace(tzinfo=UTC) if expires and expires.tzinfo is None else expires,
    )
