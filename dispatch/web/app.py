"""The ASGI app: routes, the session, the security headers and the error pages.

Starlette, for its small routing and request model, its signed session, its test client and
a server (uvicorn) that is not ours to keep; Jinja2, for templates that escape every value by
default. Nothing is fetched at run time: the stylesheet and the one script are in static/.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dispatch.client import Client
from dispatch.config.settings import Settings
from dispatch.errors import DispatchError, NotFound
from dispatch.log import event
from dispatch.web import actions, pages
from dispatch.web.auth import SESSION_S, Gate
from dispatch.web.site import SETTLE_S, Web, web_of

HERE = Path(__file__).parent
CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    ]
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


def build(
    settings: Settings,
    client: Client | None = None,
    *,
    tls: bool = False,
    every_s: float = 1.0,
) -> Starlette:
    """The app; `client` is made (and closed) by the app's lifespan when not given."""
    gate = Gate(settings.web_token)
    web = Web(settings, client or Client.from_settings(settings), gate, every_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if client is None:
            await web.client.redis.aclose()

    routes = [
        *pages.routes(),
        *actions.routes(),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [
        Middleware(Headers),
        Middleware(Settles, client=web.client),
        Middleware(
            SessionMiddleware,
            secret_key=gate.session_key(),
            session_cookie="dispatch_session",
            max_age=SESSION_S,
            same_site="strict",
            https_only=tls,
        ),
    ]
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={
            HTTPException: _http_error,
            RedisError: _unreadable,
            OSError: _unreadable,
            TimeoutError: _unreadable,
            NotFound: _missing,
            DispatchError: _refused,
            Exception: _server_error,  # logged by the server too; the page shows no trace
        },
    )
    app.state.web = web
    return app


class Headers:
    """The same security headers on every answer, pages, streams and static files alike."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


class Settles:
    """Before a request is served, the client knows whether Redis is a cluster's node: asked
    once at the first request, and at each later one while Redis has not answered it."""

    def __init__(self, app: ASGIApp, client: Client) -> None:
        self.app, self.client = app, client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.client.settle(SETTLE_S)
        await self.app(scope, receive, send)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error_page(request, exc.status_code, exc.detail)


async def _unreadable(request: Request, exc: Exception) -> Response:
    return _error_page(request, 503, f"Redis cannot be read: {type(exc).__name__}")


async def _missing(request: Request, exc: Exception) -> Response:
    return _error_page(request, 404, str(exc).splitlines()[0] if str(exc) else "not found")


async def _refused(request: Request, exc: Exception) -> Response:
    return _error_page(request, 400, str(exc).splitlines()[0] if str(exc) else "refused")


async def _server_error(request: Request, exc: Exception) -> Response:
    event("web_error", path=request.url.path, error=type(exc).__name__)
    return _error_page(request, 500, "something went wrong on the server; it is in its log")


def _error_page(request: Request, status: int, detail: str) -> Response:
    page = web_of(request).page
    return page(request, "error.html", status, status=status, detail=detail, title=str(status))
