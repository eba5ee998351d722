"""Who may do what on the page: read-only unless signed in, enforced here, on the server.

Signing in: the operator types the token (`DISPATCH_WEB_TOKEN`, or the file
`DISPATCH_WEB_TOKEN_FILE` names) into /signin; it is compared in constant time and, on a
match, the session cookie says so. The cookie is Starlette's signed session (itsdangerous),
keyed by a digest of the token: changing the token signs everyone out, and every web process
given the same token accepts the same cookie. It is HttpOnly, SameSite=Strict, Secure when
served over TLS, and lasts `SESSION_S`.

Every state-changing route is a POST that needs that session and the CSRF token it carries;
without either the answer is 403 and nothing is written. Without a token configured nobody can
sign in: the page is read-only for everyone. Failed sign-ins are limited to `TRIES` a minute
per process, so the token cannot be guessed at the speed of the network.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import deque
from collections.abc import Callable

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request

SESSION_S = 12 * 3600
TRIES = 5  # failed sign-ins per WINDOW_S, per process
WINDOW_S = 60.0
READ_ONLY = "read-only: sign in to change anything"


class TooManyTries(Exception):
    pass


class Gate:
    def __init__(self, token: str, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._token = token.encode()
        self._now = monotonic
        self._failed: deque[float] = deque()

    @property
    def enabled(self) -> bool:
        return bool(self._token)

    def session_key(self) -> str:
        if not self._token:  # nobody signs in: a key no one knows keeps the cookie meaningless
            return secrets.token_hex(32)
        return hmac.new(self._token, b"dispatch web session", hashlib.sha256).hexdigest()

    def check(self, offered: str) -> bool:
        """Whether `offered` is the token; raise TooManyTries while failures are over the rate."""
        now = self._now()
        while self._failed and now - self._failed[0] > WINDOW_S:
            self._failed.popleft()
        if len(self._failed) >= TRIES:
            raise TooManyTries
        if self._token and hmac.compare_digest(offered.strip().encode(), self._token):
            return True
        self._failed.append(now)
        return False

    def sign_in(self, request: Request) -> None:
        request.session.clear()
        request.session.update(op=True, csrf=secrets.token_urlsafe(32))

    def operator(self, request: Request) -> bool:
        return self.enabled and request.session.get("op") is True

    def csrf(self, request: Request) -> str:
        return str(request.session.get("csrf", "")) if self.operator(request) else ""

    async def require(self, request: Request) -> FormData:
        """The POST's form, once it is known to come from a signed-in operator's own page."""
        if not self.operator(request):
            raise HTTPException(403, READ_ONLY)
        form = await request.form()
        offered = form.get("csrf")
        if not isinstance(offered, str) or not hmac.compare_digest(
            offered.encode(), self.csrf(request).encode()
        ):
            raise HTTPException(403, "this form is out of date or not from this page: reload it")
        return form
