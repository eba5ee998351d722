"""A small async client for the Docker Engine HTTP API, on httpx.

The transport is configuration: `unix:///path` becomes `httpx.AsyncHTTPTransport(uds=path)`,
`tcp://host:port` a plain HTTP transport (no TLS: put a TLS-terminating proxy or an SSH tunnel
in front of a remote engine). `DOCKER_HOST` is read when no host is given, so Podman's
Docker-compatible socket works the same way (`DOCKER_HOST=unix:///run/podman/podman.sock`).
A `transport` given to the client replaces the built one (tests pass `httpx.MockTransport`:
every fault path below then runs without an engine).

The API version is negotiated once, on the first call (or `connect()`), from the unversioned
`/version`: the engine's version capped at what this client was written against; an engine
older than `MIN_API` is refused. Every later path is prefixed `/v<version>`.

Every call has a timeout. The two long calls, `wait` and `logs`, bound connecting and sending
but not reading: they last as long as the container runs, and the runner bounds that itself.

Errors are translated here and nowhere else (see `dispatch.runners.docker.errors`): httpx transport
errors become `DockerUnavailable` (`DockerTimeout` for timeouts), 404 becomes the missing
thing's error, 409 `ContainerConflict` (`ContainerNotRunning` when the container is not
running), anything else non-2xx `DockerApiError`. A 304 (already started, already stopped) counts
as success: the container is where the caller wanted it; `stop` says which of the two it was.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import struct
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import httpx

from dispatch.errors import ConfigError
from dispatch.runners.docker.errors import (
    ContainerConflict,
    ContainerNotFound,
    ContainerNotRunning,
    DockerApiError,
    DockerError,
    DockerTimeout,
    DockerUnavailable,
    ImageMissing,
    NetworkMissing,
)

if TYPE_CHECKING:
    import ssl  # httpx imports it only when a context is built

DEFAULT_HOST = "unix:///var/run/docker.sock"
MIN_API = (1, 40)  # Docker 19.03: wait conditions, NanoCpus, PidsLimit all present
MAX_API = (1, 43)  # what this client was written against; newer engines speak it too

Json = dict[str, Any]

_FRAME = struct.Struct(">BxxxI")  # multiplexed log frame: stream id, 3 pad bytes, size
_NOT_RUNNING = "is not running"  # the engine's 409 to a kill of a container that exited


def resolve_host(host: str | None = None) -> str:
    """The engine address: the one given, else DOCKER_HOST, else the standard unix socket."""
    return host or os.environ.get("DOCKER_HOST") or DEFAULT_HOST


def _base_url(host: str) -> str:
    if host.startswith("unix://"):
        return "http://docker"  # any name: the socket is the address
    if host.startswith("tcp://"):
        return "http://" + host.removeprefix("tcp://")
    raise ConfigError(f"DOCKER_HOST {host!r}: only unix:// and tcp:// are supported")


# No cap on connections: each running job holds a wait and a log stream open. Set on the
# transport: httpx ignores a client's `limits` once it is handed a transport.
_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=16)


@functools.cache
def _tls() -> ssl.SSLContext:
    """httpx's default TLS context, built once: a transport not handed one builds its own (the
    CA bundle read and parsed, 20-40 ms of CPU on the loop), and a fresh connection (the State
    after every exit) is a new transport. The engine is spoken to in plain HTTP."""
    return httpx.create_ssl_context()


def _transport(host: str) -> httpx.AsyncHTTPTransport:
    if host.startswith("unix://"):
        uds = host.removeprefix("unix://")
        return httpx.AsyncHTTPTransport(uds=uds, limits=_LIMITS, verify=_tls())
    return httpx.AsyncHTTPTransport(limits=_LIMITS, verify=_tls())


def _parse_version(text: object) -> tuple[int, int]:
    try:
        major, minor = str(text).split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        raise DockerUnavailable(f"engine reported API version {text!r}") from None


def negotiate(info: Json) -> str:
    """The API version to speak with an engine whose /version answer is `info`."""
    server = _parse_version(info.get("ApiVersion"))
    chosen = min(server, MAX_API)
    if chosen < MIN_API:
        raise DockerUnavailable(f"engine API {server[0]}.{server[1]} is older than 1.{MIN_API[1]}")
    return f"{chosen[0]}.{chosen[1]}"


def _message(resp: httpx.Response) -> str:
    try:
        return str(resp.json().get("message", "")) or resp.reason_phrase
    except (ValueError, AttributeError):
        return resp.text[:200] or resp.reason_phrase


def _check(resp: httpx.Response, missing: type[DockerError]) -> None:
    if resp.is_success or resp.status_code == 304:
        return
    message = _message(resp)
    if resp.status_code == 404:
        raise missing(message)
    if resp.status_code == 409:
        if _NOT_RUNNING in message:
            raise ContainerNotRunning(message)
        raise ContainerConflict(message)
    raise DockerApiError(resp.status_code, message)


def _json(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        raise DockerUnavailable(
            "the engine's answer is not JSON: is this the Docker API?"
        ) from None


def _translate(exc: httpx.HTTPError, what: str) -> DockerError:
    if isinstance(exc, httpx.TimeoutException):
        return DockerTimeout(f"{what}: no answer in time")
    return DockerUnavailable(f"{what}: {type(exc).__name__}: {exc}")


class ExitWait:
    """A wait the engine has registered (its headers arrived) and will answer at the exit."""

    def __init__(self, response: httpx.Response, container: str) -> None:
        self._response = response
        self._container = container

    async def result(self) -> int:
        """The container's exit code, once it exits."""
        try:
            body = await self._response.aread()
        except httpx.HTTPError as exc:
            raise _translate(exc, f"wait {self._container}") from exc
        finally:
            await self._response.aclose()
        data = json.loads(body or b"{}")
        error = (data.get("Error") or {}).get("Message")
        if error:
            raise DockerApiError(500, f"wait {self._container}: {error}")
        if "StatusCode" not in data:  # the stream ended with no answer: the engine went away
            raise DockerUnavailable(f"wait {self._container}: ended without an exit code")
        return int(data["StatusCode"])

    async def aclose(self) -> None:
        await self._response.aclose()


class DockerClient:
    def __init__(
        self,
        host: str | None = None,
        *,
        timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`transport` replaces the one built from `host` (tests pass `httpx.MockTransport`)."""
        self.host = resolve_host(host)
        self.timeout_s = timeout_s
        self._given = transport is not None
        self._http = httpx.AsyncClient(
            transport=transport or _transport(self.host),
            base_url=_base_url(self.host),
            timeout=timeout_s,
        )
        self._api: str | None = None
        self._negotiating = asyncio.Lock()
        self._before_close: set[asyncio.Task[None]] = set()

    def keep_open_for(self, task: asyncio.Task[None]) -> None:
        """The client closes only once `task` has ended: a container removed in the background
        after its run (runner.py) is removed, not cut off mid-call, by a close meanwhile."""
        self._before_close.add(task)
        task.add_done_callback(self._before_close.discard)

    async def __aenter__(self) -> DockerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._before_close:  # each call is bounded by the client's timeout
            await asyncio.wait(set(self._before_close))
        await self._http.aclose()

    @property
    def api_version(self) -> str | None:
        return self._api

    async def connect(self) -> str:
        """Negotiate the API version (once); raise DockerUnavailable when no engine answers."""
        async with self._negotiating:
            if self._api is None:
                self._api = negotiate(await self.version())
        return self._api

    async def _path(self, path: str) -> str:
        return f"/v{self._api or await self.connect()}{path}"

    async def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        body: Json | None = None,
        timeout_s: float | None = None,
        missing: type[DockerError] = ContainerNotFound,
        versioned: bool = True,
        fresh: bool = False,
    ) -> httpx.Response:
        url = await self._path(path) if versioned else path
        http = self._one_off() if fresh else self._http
        try:
            resp = await http.request(
                method, url, params=params, json=body, timeout=timeout_s or self.timeout_s
            )
        except httpx.HTTPError as exc:
            raise _translate(exc, f"{method} {path}") from exc
        finally:
            if http is not self._http:
                await http.aclose()
        _check(resp, missing)
        return resp

    def _one_off(self) -> httpx.AsyncClient:
        """A client with a connection of its own (a given transport has no pool to avoid)."""
        if self._given:
            return self._http
        return httpx.AsyncClient(
            transport=_transport(self.host), base_url=_base_url(self.host), timeout=self.timeout_s
        )

    async def _open(
        self, method: str, path: str, params: Mapping[str, str | int]
    ) -> httpx.Response:
        """Send a request and return once its headers arrived; the body is read by the caller."""
        t = self.timeout_s
        timeout = httpx.Timeout(connect=t, read=None, write=t, pool=t)
        request = self._http.build_request(
            method, await self._path(path), params=params, timeout=timeout
        )
        try:
            resp = await self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise _translate(exc, f"{method} {path}") from exc
        if not resp.is_success:
            await resp.aread()
            await resp.aclose()
            _check(resp, ContainerNotFound)
        return resp

    async def ping(self) -> str:
        return (await self._call("GET", "/_ping", versioned=False)).text

    async def version(self) -> Json:
        info: Json = _json(await self._call("GET", "/version", versioned=False))
        return info

    async def image_inspect(self, ref: str) -> Json:
        image: Json = _json(await self._call("GET", f"/images/{ref}/json", missing=ImageMissing))
        return image

    async def create_container(self, name: str, config: Json) -> str:
        """Create (never pull): a missing image raises ImageMissing. Returns the id."""
        resp = await self._call(
            "POST", "/containers/create", params={"name": name}, body=config, missing=ImageMissing
        )
        return str(_json(resp)["Id"])

    async def start(self, container: str) -> None:
        await self._call("POST", f"/containers/{container}/start")

    async def wait(self, container: str, condition: str = "next-exit") -> ExitWait:
        """Register a wait; call before `start` with `next-exit` so a fast exit is not missed."""
        resp = await self._open("POST", f"/containers/{container}/wait", {"condition": condition})
        return ExitWait(resp, container)

    async def inspect(self, container: str, *, fresh: bool = False) -> Json:
        """`fresh`: over a new connection, so that only an engine still taking connections
        answers. A dockerd shutting down stops taking them before it stops its containers,
        while the connections it already has go on being served."""
        resp = await self._call("GET", f"/containers/{container}/json", fresh=fresh)
        info: Json = _json(resp)
        return info

    async def logs(self, container: str, *, follow: bool = True) -> AsyncGenerator[bytes, None]:
        """stdout and stderr as they come, demultiplexed (containers here never have a TTY)."""
        params = {"stdout": 1, "stderr": 1, "follow": int(follow)}
        resp = await self._open("GET", f"/containers/{container}/logs", params)
        try:
            async for payload in _demux(resp.aiter_raw()):
                yield payload
        except httpx.HTTPError as exc:
            raise _translate(exc, f"logs {container}") from exc
        finally:
            await resp.aclose()

    async def stop(self, container: str, grace_s: float) -> bool:
        """SIGTERM, then SIGKILL after the grace; returns once the container has stopped:
        True when this stop stopped it, False when it had stopped already (304)."""
        t = math.ceil(grace_s)
        resp = await self._call(
            "POST", f"/containers/{container}/stop", params={"t": t}, timeout_s=t + self.timeout_s
        )
        return resp.status_code != 304

    async def kill(self, container: str, signal: str = "KILL") -> None:
        """ContainerNotRunning when the container is not running (it exited already)."""
        await self._call("POST", f"/containers/{container}/kill", params={"signal": signal})

    async def remove(self, container: str, *, force: bool = False) -> None:
        params = {"force": int(force), "v": 1}
        await self._call("DELETE", f"/containers/{container}", params=params)

    async def list_containers(self, labels: Mapping[str, str], *, all: bool = True) -> list[Json]:
        filters = json.dumps({"label": [f"{k}={v}" for k, v in labels.items()]})
        resp = await self._call(
            "GET", "/containers/json", params={"all": int(all), "filters": filters}
        )
        found: list[Json] = _json(resp)
        return found

    async def network_inspect(self, name: str) -> Json:
        """A network by name or id; NetworkMissing when there is none."""
        resp = await self._call("GET", f"/networks/{name}", missing=NetworkMissing)
        info: Json = _json(resp)
        return info

    async def network_create(self, name: str, labels: Mapping[str, str]) -> None:
        """An internal bridge network: the engine gives it no route out of the host."""
        body: Json = {"Name": name, "Driver": "bridge", "Internal": True, "Labels": dict(labels)}
        await self._call("POST", "/networks/create", body={**body, "CheckDuplicate": True})

    async def network_remove(self, name: str) -> None:
        await self._call("DELETE", f"/networks/{name}", missing=NetworkMissing)

    async def events(
        self, filters: Mapping[str, list[str]], since_s: float, until_s: float
    ) -> list[Json]:
        """Past events in a window (the window must be closed, or the engine streams forever)."""
        params = {
            "since": f"{since_s:.3f}",
            "until": f"{until_s:.3f}",
            "filters": json.dumps(filters),
        }
        resp = await self._call("GET", "/events", params=params)
        return [json.loads(line) for line in resp.text.splitlines() if line.strip()]


async def _demux(raw: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Strip the 8-byte frame headers of a multiplexed stream, yielding the payloads."""
    buf = bytearray()
    async for chunk in raw:
        buf += chunk
        while len(buf) >= _FRAME.size:
            _, size = _FRAME.unpack_from(buf)
            if len(buf) < _FRAME.size + size:
                break
            yield bytes(buf[_FRAME.size : _FRAME.size + size])
            del buf[: _FRAME.size + size]
