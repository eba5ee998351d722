"""The web app against a real Redis: built on the test's own prefix and config dir, reached
through httpx's ASGI transport on the test's own event loop (the loop the `redis` fixture's
connections belong to). Event streams never end, so their tests read the generators
(dispatch/web/feed.py, tails.py) or a real server (tests/web/test_browser.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette

from dispatch.client import Client
from dispatch.config.settings import Settings, from_env
from dispatch.web.app import build

TOKEN = "a-test-token-of-some-length"


@pytest.fixture
def settings(redis_url: str, prefix: str, tmp_path: Path) -> Settings:
    (tmp_path / "config").mkdir()
    env = {
        "DISPATCH_REDIS_URL": redis_url,
        "DISPATCH_PREFIX": prefix,
        "DISPATCH_STATE_DIR": str(tmp_path / "state"),
        "DISPATCH_CONFIG_DIR": str(tmp_path / "config"),
        "DISPATCH_HOST": "web-test",
        "DISPATCH_WEB_TOKEN": TOKEN,
    }
    return from_env(env)


@pytest.fixture
def client(redis: Redis, settings: Settings) -> Client:
    return Client(redis, settings.prefix, settings.host)


@pytest.fixture
def app(settings: Settings, client: Client) -> Starlette:
    return build(settings, client)


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        yield c


async def signed_in(http: httpx.AsyncClient) -> str:
    """Sign `http` in; the CSRF token its pages carry."""
    answer = await http.post("/signin", data={"token": TOKEN})
    assert answer.status_code == 303, answer.text
    page = await http.get("/")
    return csrf_of(page.text)


def csrf_of(html: str) -> str:
    import re

    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field on the page"
    return found[1]
