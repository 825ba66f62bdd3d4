"""Console sessions: the admin token, presented once on the login form, buys a random cookie
(HttpOnly, SameSite=Strict, `console.secure_cookie`) whose hash is stored server-side with its
expiry and an HMAC of the admin token, so logout, a rotated admin token and the expiry each end
it. Forms that change state also carry a token derived from the cookie, so another site cannot
post them. Sync: the store reads the database; async callers use a thread.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from gateway.http.console.session_store import ConsoleSessionStore

COOKIE = "lantern_console"
MAX_COOKIE_CHARS = 128  # ours are 43; anything longer is not worth a database read


class ConsoleSessions:
    def __init__(
        self,
        admin_token: str | None,
        secret: bytes,
        store: ConsoleSessionStore,
        clock: Callable[[], datetime],
        ttl_s: int,
        new_cookie: Callable[[], str] = lambda: secrets.token_urlsafe(32),
    ) -> None:
        self._admin_token = admin_token
        self._key = hmac.new(secret, b"lantern-console-v2", hashlib.sha256).digest()
        self._admin_hmac = self._sign("admin-token:" + (admin_token or ""))
        self._store = store
        self._clock = clock
        self.ttl_s = ttl_s
        self._new_cookie = new_cookie

    @property
    def is_enabled(self) -> bool:
        return bool(self._admin_token)

    def is_admin_token(self, presented: str) -> bool:
        if not self._admin_token:
            return False
        return hmac.compare_digest(presented.encode(), self._admin_token.encode())

    def login(self, presented: str) -> str | None:
        """A new session's cookie value when `presented` is the admin token, else None."""
        if not self.is_admin_token(presented):
            return None
        cookie, now = self._new_cookie(), self._clock()
        expires = now + timedelta(seconds=self.ttl_s)
        self._store.open(_digest(cookie), self._admin_hmac, now, expires)
        return cookie

    def is_valid(self, cookies: Mapping[str, str]) -> bool:
        """The cookie names a stored session, opened with today's admin token, not expired."""
        value = cookies.get(COOKIE, "")
        if not self.is_enabled or not value or len(value) > MAX_COOKIE_CHARS:
            return False
        found = self._store.find(_digest(value))
        if found is None or not hmac.compare_digest(found.admin_hmac, self._admin_hmac):
            return False
        return self._clock() < found.expires_at

    def logout(self, cookies: Mapping[str, str]) -> None:
        value = cookies.get(COOKIE, "")
        if value and len(value) <= MAX_COOKIE_CHARS:
            self._store.close(_digest(value))

    def form_token(self, cookies: Mapping[str, str]) -> str:
        return self._sign("form:" + cookies.get(COOKIE, ""))[:32]

    def is_form_token(self, cookies: Mapping[str, str], token: str) -> bool:
        return hmac.compare_digest(token.encode(), self.form_token(cookies).encode())

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()


def _digest(cookie: str) -> str:
    return hashlib.sha256(cookie.encode("utf-8", "replace")).hexdigest()
