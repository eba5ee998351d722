"""A proxy in front of the session's redis-server, to turn it bad on command, and a reader of
the events a test's own process logs."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from redis.asyncio import Redis

from dispatch import log
from dispatch.queue.connect import redis_client
from tests.support.redis_proxy import RedisProxy


@pytest.fixture
def proxy(redis_url: str) -> Iterator[RedisProxy]:
    port = urlsplit(redis_url).port
    if port is None:
        pytest.skip("the proxy needs a TCP redis-server")
    running = RedisProxy(port).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
async def proxied(proxy: RedisProxy) -> AsyncIterator[Redis]:
    """A client through the proxy, built as the daemon builds its own."""
    client = redis_client(proxy.url, socket_timeout=2)
    try:
        yield client
    finally:
        await client.aclose()


class Events:
    def __init__(self, stream: io.StringIO) -> None:
        self.stream = stream

    def __call__(self, name: str | None = None) -> list[dict[str, Any]]:
        lines = [json.loads(line) for line in self.stream.getvalue().splitlines()]
        return [e for e in lines if name is None or e["event"] == name]


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> Events:
    stream = io.StringIO()
    monkeypatch.setattr(log.log, "stream", stream)
    monkeypatch.setattr(log.log, "human", False)
    return Events(stream)
