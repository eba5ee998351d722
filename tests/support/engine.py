"""A scripted Docker engine behind `httpx.MockTransport`, for the client's and the runner's
fault paths: no engine, no root, so these run in `make test-fast`.

Routes are keyed by method and the path without its `/v<api>` prefix; every request is noted
(method, full path, query, timeouts, body) so a test can say what was asked as well as what
came out. A request no route answers fails the test loudly.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from dispatch.runners.docker import DEFAULT_HOST, DockerClient

API = "1.43"  # the client's MAX_API: an engine this new is spoken to in its own version

Answer = Callable[[httpx.Request], httpx.Response | Awaitable[httpx.Response]]


@dataclass(frozen=True)
class Seen:
    method: str
    url: str
    path: str  # as sent, version prefix included
    params: dict[str, str]
    timeout: dict[str, float | None]
    body: Any  # the JSON body, or None


class FakeEngine:
    def __init__(self, api_version: str = API) -> None:
        self.routes: dict[tuple[str, str], Answer] = {
            ("GET", "/version"): reply(200, {"ApiVersion": api_version, "Version": "fake"})
        }
        self.seen: list[Seen] = []

    def on(self, method: str, path: str, answer: Answer) -> None:
        self.routes[(method, path)] = answer

    def client(self, host: str = DEFAULT_HOST, timeout_s: float = 5.0) -> DockerClient:
        return DockerClient(host, timeout_s=timeout_s, transport=httpx.MockTransport(self))

    def calls(self) -> list[tuple[str, str]]:
        return [(s.method, s.path) for s in self.seen]

    def last(self, method: str, path_end: str) -> Seen:
        return next(
            s for s in reversed(self.seen) if s.method == method and s.path.endswith(path_end)
        )

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(_seen(request))
        path = re.sub(r"^/v\d+\.\d+/", "/", request.url.path)
        answer = self.routes.get((request.method, path))
        if answer is None:
            raise AssertionError(
                f"the fake engine was not told how to answer {request.method} {path}"
            )
        response = answer(request)
        return await response if inspect.isawaitable(response) else response


def _seen(request: httpx.Request) -> Seen:
    return Seen(
        method=request.method,
        url=str(request.url.copy_with(query=None)),
        path=request.url.path,
        params=dict(request.url.params),
        timeout=dict(request.extensions.get("timeout", {})),
        body=json.loads(request.content) if request.content else None,
    )


def reply(status: int, body: Any = None, *, text: str | None = None) -> Answer:
    """A fresh response per request: JSON `body`, or plain `text`, or nothing."""

    def answer(request: httpx.Request) -> httpx.Response:
        if text is not None:
            return httpx.Response(status, text=text)
        return httpx.Response(status, json=body) if body is not None else httpx.Response(status)

    return answer


def fail(error: type[httpx.TransportError], message: str = "fault") -> Answer:
    """The transport fails as httpx's own would (refused, timed out, reset...)."""

    def answer(request: httpx.Request) -> httpx.Response:
        raise error(message, request=request)

    return answer


def streamed(chunks: Callable[[], AsyncIterator[bytes]], status: int = 200) -> Answer:
    """A body that arrives in `chunks` after the headers, as a wait's or a log's does (a
    `reply` body is read at once, and httpx will not stream it again)."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=chunks())

    return answer


def chunked(*chunks: bytes, then: Exception | None = None) -> Answer:
    """A streamed body of these chunks, then `then` raised (a connection lost mid-body)."""

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk
        if then is not None:
            raise then

    return streamed(body)
