"""Console sessions: the admin token, presented once on the login form, buys a signed cookie
(HMAC-SHA256 over the expiry with the server secret; HttpOnly, SameSite=Strict). Forms that
change state also carry a token derived from the cookie, so another site cannot post them.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping

COOKIE = "lantern_console"
SESSION_TTL_S = 8 * 3600


class ConsoleSessions:
    def __init__(self, admin_token: str | None, secret: bytes, clock: Callable[[], float]) -> None:
        self._admin_token = admin_token
        self._key = hmac.new(secret, b"lantern-console-v1", hashlib.sha256).digest()
        self._clock = clock

    @property
    def is_enabled(self) -> bool:
        return bool(self._admin_token)

    def login(self, presented: str) -> str | None:
        """A cookie value when `presented` is the admin token, else None."""
        if not self._admin_token:
            return None
        if not hmac.compare_digest(presented.encode(), self._admin_token.encode()):
            return None
        expires = str(int(self._clock()) + SESSION_TTL_S)
        return f"{expires}.{self._sign(expires)}"

    def is_valid(self, cookies: Mapping[str, str]) -> bool:
        value = cookies.get(COOKIE, "")
        expires, _, signature = value.partition(".")
        if not expires.isdigit() or not hmac.compare_digest(signature, self._sign(expires)):
            return False
        return int(expires) > self._clock()

    def form_token(self, cookies: Mapping[str, str]) -> str:
        return self._sign("form:" + cookies.get(COOKIE, ""))[:32]

    def is_form_token(self, cookies: Mapping[str, str], token: str) -> bool:
        return hmac.compare_digest(token, self.form_token(cookies))

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()
