"""The egress proxy: an HTTP proxy in the daemon's loop, listening on the job network's gateway.

    CONNECT host:port          a TLS tunnel (or any TCP stream) once the job's rules allow it
    GET http://host[:port]/..  plain HTTP, forwarded with an origin-form target, the Host header
                               set from the checked URI, and `Connection: close` (one request
                               per connection: a second one can never slip past the check)

A job is known by its credentials (`Proxy-Authorization: Basic job:token`, from the
HTTPS_PROXY the runner gives it); no credentials answer 407, a host its rules do not allow 403
with one `egress_refused` line naming the job, the host and the port (never a path or body).
The proxy resolves names itself and dials exactly the address it checked: a name never leads
to an address that is not public, nor to one of this host's own, whatever the rule
(addresses.py); only a rule that writes the address does.

Bounded, in two phases. Until its request head is in, a connection is in the head pool:
`max_heads` of them in all and `max_heads_per_source` from one address (each job's container
has its own on the job network), its request line within `first_line_s` and the whole head,
at most `max_head` bytes, within `head_timeout_s`; past a bound it is answered 429 or 503 at
once. So one job opening thousands of sockets and sending a byte on each holds a few slots for
two seconds, and every other job's CONNECT is still read at once. Once granted, a connection
counts against `max_per_job` and `max_total` until it ends, and a tunnel idle (no byte either
way) for `idle_timeout_s` is closed (relay.py). h11, the parser under httpx, reads the heads.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hmac
import http
import socket
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import h11

from dispatch.egress.addresses import parse as parse_address
from dispatch.egress.addresses import why_not
from dispatch.egress.relay import Limits, forward, tunnel
from dispatch.egress.rules import Rule, allows, is_address, normal_host, parse_port
from dispatch.log import event


@dataclass
class Grant:
    """One running job's right to use the proxy; `rules()` answers with the rules as of now."""

    job: str
    token: str
    rules: Callable[[], Sequence[Rule]]
    narrow: tuple[Rule, ...] = ()  # the job's own --egress: it may narrow, never widen
    open: int = field(default=0)

    def allowed(self, host: str, port: int) -> Rule | None:
        rule = allows(self.rules(), host, port)
        if rule is None or (self.narrow and allows(self.narrow, host, port) is None):
            return None
        return rule


class Refused(Exception):
    def __init__(self, status: int, text: str, headers: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(text)
        self.status, self.text, self.headers = status, text, list(headers)


# (name, port) -> the (family, address) pairs it resolves to; a test may answer for DNS
Resolve = Callable[[str, int], Awaitable[list[tuple[int, str]]]]


async def system_resolve(host: str, port: int) -> list[tuple[int, str]]:
    found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [(family, str(address[0])) for family, _, _, _, address in found]


class EgressProxy:
    def __init__(
        self,
        grants: dict[str, Grant],
        limits: Limits | None = None,
        resolve: Resolve = system_resolve,
    ) -> None:
        self.grants = grants  # job id -> grant, kept by the guard
        self.limits = limits or Limits()
        self.resolve = resolve
        self.summary = "no allow-list"  # what an unauthenticated caller (doctor) is told
        self._server: asyncio.Server | None = None
        self._open = 0  # granted connections
        self.heads: Counter[str] = Counter()  # source address -> connections in the head pool

    @property
    def serving(self) -> bool:
        return self._server is not None and self._server.is_serving()

    async def start(self, host: str, port: int) -> int:
        """Listen on host:port (0: any free port); the port it listens on."""
        self._server = await asyncio.start_server(
            self._handle, host, port, reuse_address=True, limit=self.limits.max_head
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1)
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.max_head)
        try:
            request = await self._read_head(conn, reader, _source(writer))
            self._open += 1
            try:
                if self._open > self.limits.max_total:
                    raise Refused(503, "too many connections")
                await self._serve(conn, request, reader, writer)
            finally:
                self._open -= 1
        except Refused as exc:
            _answer(writer, exc.status, exc.text, exc.headers)
        except (h11.RemoteProtocolError, TimeoutError):
            _answer(writer, 400, "bad request")
        except (OSError, h11.LocalProtocolError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
                await writer.wait_closed()

    async def _read_head(
        self, conn: h11.Connection, reader: asyncio.StreamReader, source: str
    ) -> h11.Request:
        """The request head, read in the head pool (module docstring)."""
        if self.heads[source] >= self.limits.max_heads_per_source:
            raise Refused(429, "too many unfinished requests from this address")
        if self.heads.total() >= self.limits.max_heads:
            raise Refused(503, "too many unfinished requests")
        self.heads[source] += 1
        try:
            return await _head(conn, reader, self.limits)
        finally:
            self.heads[source] -= 1
            if not self.heads[source]:
                del self.heads[source]

    async def _serve(
        self,
        conn: h11.Connection,
        request: h11.Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        grant = self._grant(request)
        if grant.open >= self.limits.max_per_job:
            raise Refused(429, "too many connections for this job")
        grant.open += 1
        try:
            host, port, target = _target(request)
            rule = grant.allowed(host, port)
            if rule is None:
                event("egress_refused", job=grant.job, host=normal_host(host), port=port)
                raise Refused(403, "not on this job's egress allow-list")
            upstream = await self._dial(grant, host, port, rule)
            if request.method == b"CONNECT":
                await tunnel(conn, reader, writer, upstream, self.limits.idle_timeout_s)
            else:
                await forward(conn, request, target, (reader, writer), upstream, self.limits)
        finally:
            grant.open -= 1

    def _grant(self, request: h11.Request) -> Grant:
        job, token = _credentials(request)
        grant = self.grants.get(job)
        if grant is None or not _same(grant.token, token):
            realm = ("Proxy-Authenticate", 'Basic realm="dispatch"')
            raise Refused(407, f"dispatch egress proxy: {self.summary}", [realm])
        return grant

    async def _dial(
        self, grant: Grant, host: str, port: int, rule: Rule
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        name, t = normal_host(host), self.limits.connect_timeout_s
        try:
            found = await asyncio.wait_for(self.resolve(name, port), t)
            family, address = found[0]
        except (OSError, TimeoutError, IndexError) as exc:
            raise Refused(502, f"cannot reach {name}:{port}") from exc
        if not names_address(rule):
            self._check(grant, name, port, [a for _, a in found])
        try:
            return await asyncio.wait_for(asyncio.open_connection(address, port, family=family), t)
        except (OSError, TimeoutError) as exc:
            raise Refused(502, f"cannot reach {name}:{port}") from exc

    def _check(self, grant: Grant, name: str, port: int, addresses: list[str]) -> None:
        """Every address the name gave must be public: one that is not refuses the name."""
        for address in addresses:
            try:
                why = why_not(parse_address(address))
            except ValueError:
                why = "unreadable"
            if why is not None:
                event(
                    "egress_refused", job=grant.job, host=name, port=port, address=address, why=why
                )
                raise Refused(
                    403,
                    f"{name} resolves to a {why} address ({address}): a name never leads there;"
                    " only a rule that writes the address does",
                )


def names_address(rule: Rule) -> bool:
    """Whether the rule says where it leads: an address, `localhost` (the loopback), or a
    model endpoint's host (model-endpoints.json: the operator's own server, by name)."""
    if rule.wildcard:
        return False
    return rule.endpoint or rule.host == "localhost" or is_address(rule.host)


async def _head(conn: h11.Connection, reader: asyncio.StreamReader, limits: Limits) -> h11.Request:
    """The request head, line by line to its blank line: the request line within
    `first_line_s`, all of it within `head_timeout_s` and `max_head` bytes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.head_timeout_s
    head = bytearray()
    wait = limits.first_line_s
    while True:
        try:
            line = await asyncio.wait_for(reader.readuntil(b"\r\n"), wait)
        except asyncio.LimitOverrunError:
            raise Refused(431, "request head too large") from None
        head += line
        if len(head) > limits.max_head:
            raise Refused(431, "request head too large")
        if line == b"\r\n" and len(head) > 2:
            break
        wait = max(deadline - loop.time(), 0.0)
    conn.receive_data(bytes(head))
    got = conn.next_event()
    if not isinstance(got, h11.Request):
        raise h11.RemoteProtocolError("no request")
    return got


def _source(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else "?"


def _credentials(request: h11.Request) -> tuple[str, str]:
    for name, value in request.headers:
        if name == b"proxy-authorization" and value[:6].lower() == b"basic ":
            with contextlib.suppress(binascii.Error, UnicodeDecodeError):
                job, _, token = base64.b64decode(value[6:].strip()).decode().partition(":")
                return job, token
    return "", ""


def _same(a: str, b: str) -> bool:
    return bool(b) and hmac.compare_digest(a.encode(), b.encode())


def _target(request: h11.Request) -> tuple[str, int, bytes]:
    """host, port and the origin-form target (b"" for CONNECT); Refused 400 otherwise."""
    text = request.target.decode("ascii", "replace")
    if request.method == b"CONNECT":
        return (*_authority(text, None), b"")
    if not text.lower().startswith("http://"):
        raise Refused(400, "use CONNECT for TLS, or an absolute http:// URI")
    authority, slash, path = text[7:].partition("/")
    authority = authority.rpartition("@")[2]  # userinfo is no part of where it goes
    return (*_authority(authority, 80), (slash + path or "/").encode())


def _authority(text: str, default: int | None) -> tuple[str, int]:
    try:
        if text.startswith("["):
            host, _, tail = text[1:].partition("]")
            port = tail.removeprefix(":")
        else:
            host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
        if not port and default is None:
            raise ValueError("a port is needed")
        return host, parse_port(port) if port else int(default or 0)
    except ValueError:
        raise Refused(400, "bad host or port") from None


def _answer(
    writer: asyncio.StreamWriter,
    status: int,
    text: str,
    headers: Sequence[tuple[str, str]] = (),
) -> None:
    """Written by hand, not through h11: a head that never arrived still gets its answer."""
    body = (text + "\n").encode()
    head = [
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}",
        *(f"{k}: {v}" for k, v in headers),
    ]
    head += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    with contextlib.suppress(OSError):
        writer.write("\r\n".join(head).encode() + body)
