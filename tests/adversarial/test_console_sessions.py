"""The console from outside, as another site or a guesser would use it, against a real gateway:
a logged-out cookie no longer opens a page (it did: the cookie was a signed expiry, valid 8 h
whatever happened), nor does one from before the admin token was rotated; `GET
/console/logout` (a link or an image on another site) logs nobody out; no page can be framed;
wrong tokens are throttled per client address; `console.secure_cookie` marks the cookie
Secure."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import models_for
from tests.e2e.harness import ADMIN_TOKEN, RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.upstream import FakeUpstream

FORM_TOKEN = re.compile(r'name="form_token" value="([0-9a-f]{32})"')


@pytest.fixture
def config(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", "lt-acme-console-key-01")
    with FakeUpstream() as fake:
        yield write_config(tmp_path / "lantern.yaml", tmp_path, models_for(fake))


@pytest.fixture
def gateway(config: Path) -> Iterator[RunningGateway]:
    running = start_gateway(config)
    try:
        yield running
    finally:
        running.stop()


def log_in(url: str, token: str = ADMIN_TOKEN) -> httpx.Response:
    return httpx.post(f"{url}/console/login", data={"token": token}, timeout=10)


def session_cookie(url: str) -> dict[str, str]:
    reply = log_in(url)
    assert reply.status_code == 303, reply.text
    return {"lantern_console": reply.cookies["lantern_console"]}


def opens_keys(url: str, cookies: dict[str, str]) -> bool:
    reply = httpx.get(f"{url}/console/keys", cookies=cookies, timeout=10)
    assert reply.status_code in (200, 303)
    return reply.status_code == 200


def test_logout_ends_the_session_for_every_copy_of_the_cookie(gateway: RunningGateway) -> None:
    url, cookies = gateway.url, session_cookie(gateway.url)
    page = httpx.get(f"{url}/console/keys", cookies=cookies, timeout=10)
    assert page.status_code == 200
    form_token = FORM_TOKEN.findall(page.text)[0]

    # a GET is a page name, and there is no page called logout
    assert httpx.get(f"{url}/console/logout", cookies=cookies).status_code == 404
    stale = httpx.post(f"{url}/console/logout", cookies=cookies, data={"form_token": "0" * 32})
    assert stale.status_code == 403
    assert opens_keys(url, cookies)  # neither logged out

    out = httpx.post(f"{url}/console/logout", cookies=cookies, data={"form_token": form_token})
    assert out.status_code == 303 and out.headers["location"] == "/console/login"
    assert not opens_keys(url, cookies)  # the old cookie, replayed
    issue = {"form_token": form_token, "tenant": "acme"}
    refused = httpx.post(f"{url}/console/keys", cookies=cookies, data=issue)
    assert refused.status_code == 303  # and it issues no key
    listed = httpx.get(f"{url}/admin/keys", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    assert listed.json()["keys"] == []


def test_rotating_the_admin_token_ends_every_session(config: Path) -> None:
    first = start_gateway(config)
    try:
        cookies = session_cookie(first.url)
        assert opens_keys(first.url, cookies)
    finally:
        first.stop()
    rotated = start_gateway(config, admin_token="admin-rotated-token")
    try:
        assert not opens_keys(rotated.url, cookies)
        assert log_in(rotated.url).status_code == 401  # the old token is no longer the token
        assert log_in(rotated.url, "admin-rotated-token").status_code == 303
    finally:
        rotated.stop()


def test_no_console_page_can_be_framed(gateway: RunningGateway) -> None:
    cookies = session_cookie(gateway.url)
    for path in ("/console/login", "/console/keys", "/console/spend", "/console/nope"):
        reply = httpx.get(f"{gateway.url}{path}", cookies=cookies, timeout=10)
        assert reply.headers["x-frame-options"] == "DENY", path
        assert "frame-ancestors 'none'" in reply.headers["content-security-policy"], path


def test_wrong_tokens_are_throttled_per_client_address(gateway: RunningGateway) -> None:
    for _ in range(10):  # console.max_login_failures
        assert log_in(gateway.url, "guess").status_code == 401
    throttled = log_in(gateway.url, "guess")
    assert throttled.status_code == 429
    assert 1 <= int(throttled.headers["retry-after"]) <= 300  # console.login_window_s
    assert log_in(gateway.url).status_code == 429  # the right token too, until the window ends
    elsewhere = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"))
    with elsewhere:
        reply = elsewhere.post(f"{gateway.url}/console/login", data={"token": ADMIN_TOKEN})
    assert reply.status_code == 303  # another address is not held up


def test_the_cookie_is_secure_when_configured(config: Path) -> None:
    running = start_gateway(config, console={"secure_cookie": True})
    try:
        cookie = log_in(running.url).headers["set-cookie"]
    finally:
        running.stop()
    assert "; Secure" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
