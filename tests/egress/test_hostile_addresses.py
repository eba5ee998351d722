"""Names that answer with addresses a job must never reach through the proxy (issue 26, item 2):
the real proxy on loopback, its resolver answering as a hostile DNS would, and a listener on
this host that must never see a byte. Each answer is refused 403 with one log line; only a
rule that writes the address (or `localhost`) reaches it."""

from __future__ import annotations

import asyncio
import base64
import io
import ipaddress
import json
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.egress.addresses import Address, carried, own, parse, why_not
from dispatch.egress.proxy import EgressProxy, Grant
from dispatch.egress.rules import endpoint_rule, parse_rule

pytestmark = pytest.mark.anyio

HOSTILE = [
    "127.0.0.1", "127.8.9.10", "::1", "0.0.0.0", "::", "::ffff:127.0.0.1", "::ffff:0.0.0.0",
    "169.254.169.254", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1",
    "2002:7f00:1::1", "2002:a9fe:a9fe::", "2001:0:4136:e378:8000:63bf:80ff:fffe",
    "10.0.0.5", "172.17.0.1", "192.168.1.1", "100.64.0.1", "fc00::1", "fd12:3456::1", "fe80::1",
    "224.0.0.1", "239.255.255.250", "ff02::1", "240.0.0.1", "255.255.255.255", "198.18.0.1",
    "192.0.2.1", "2001:db8::1",
]  # fmt: skip
PUBLIC = "93.184.215.14"  # never dialled here: it comes beside a hostile answer
HEAD = "HTTP/1.1\r\nHost: x\r\n\r\n"


class Listener:
    """A service on this host that a job must not reach: it counts what reaches it."""

    def __init__(self) -> None:
        self.connections = 0
        self.bytes = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        data = await reader.read(65536)
        self.bytes += len(data)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()


@pytest.fixture
async def listener() -> AsyncIterator[tuple[Listener, int]]:
    seen = Listener()
    server = await asyncio.start_server(seen.handle, "127.0.0.1", 0)
    yield seen, int(server.sockets[0].getsockname()[1])
    server.close()


def answering(*addresses: str):
    async def resolve(host: str, port: int) -> list[tuple[int, str]]:
        return [(10 if ":" in a else 2, a) for a in addresses]

    return resolve


async def through(proxy_port: int, head: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    cred = f"\r\nProxy-Authorization: Basic {base64.b64encode(b'j1:tok-j1').decode()}\r\n\r\n"
    writer.write(head.replace("\r\n\r\n", cred).encode())
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return answer


async def proxy_for(rule: str, *answers: str) -> tuple[EgressProxy, int]:
    rules = (parse_rule(rule),)
    proxy = EgressProxy({"j1": Grant("j1", "tok-j1", lambda: rules)}, resolve=answering(*answers))
    return proxy, await proxy.start("127.0.0.1", 0)


def refusals(logged: io.StringIO) -> list[dict]:
    rows = [json.loads(line) for line in logged.getvalue().splitlines() if line.startswith("{")]
    return [r for r in rows if r.get("event") == "egress_refused"]


@pytest.mark.parametrize("answer", HOSTILE)
@pytest.mark.parametrize("form", ["wildcard", "exact"])
async def test_a_name_never_leads_to_a_hostile_address(
    answer: str, form: str, listener: tuple[Listener, int], logged: io.StringIO
) -> None:
    seen, port = listener
    name = "mapped.attacker.example"
    rule = f"*.attacker.example:{port}" if form == "wildcard" else f"{name}:{port}"
    for answers in ((answer,), (PUBLIC, answer)):
        proxy, proxy_port = await proxy_for(rule, *answers)
        try:
            tunnel = await through(proxy_port, f"CONNECT {name}:{port} {HEAD}")
            plain = await through(proxy_port, f"GET http://{name}:{port}/ {HEAD}")
        finally:
            await proxy.close()
        assert tunnel.startswith(b"HTTP/1.1 403") and plain.startswith(b"HTTP/1.1 403")
        assert b"a name never leads there" in tunnel
    assert seen.connections == 0 and seen.bytes == 0
    rows = refusals(logged)
    assert len(rows) == 4 and {r["address"] for r in rows} == {answer}
    assert all(r["host"] == name and r["port"] == port and r["why"] for r in rows)


@pytest.mark.parametrize("rule", ["127.0.0.1:{port}", "localhost:{port}"])
async def test_a_rule_that_writes_the_address_reaches_it(
    rule: str, listener: tuple[Listener, int], logged: io.StringIO
) -> None:
    seen, port = listener
    host = rule.partition(":")[0]
    proxy, proxy_port = await proxy_for(rule.format(port=port), "127.0.0.1")
    try:
        answer = await through(proxy_port, f"GET http://{host}:{port}/ {HEAD}")
    finally:
        await proxy.close()
    assert answer.startswith(b"HTTP/1.1 200") and seen.connections == 1
    assert refusals(logged) == []


async def test_a_model_endpoint_named_by_the_operator_reaches_its_private_address(
    listener: tuple[Listener, int],
) -> None:
    seen, port = listener
    rule = endpoint_rule(f"http://gpu-1.lan:{port}/v1")
    assert rule is not None
    grants = {"j1": Grant("j1", "tok-j1", lambda: (rule,))}
    proxy = EgressProxy(grants, resolve=answering("127.0.0.1"))
    proxy_port = await proxy.start("127.0.0.1", 0)
    try:
        answer = await through(proxy_port, f"GET http://gpu-1.lan:{port}/ {HEAD}")
    finally:
        await proxy.close()
    assert answer.startswith(b"HTTP/1.1 200") and seen.connections == 1


def test_this_hosts_own_addresses_are_known_by_the_kernel() -> None:
    assert own(parse("127.0.0.1"))
    assert not own(parse("192.0.2.77"))  # documentation range: on no interface
    assert why_not(parse("93.184.215.14")) is None


NOT_GLOBAL_V4 = [
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8", "169.254.0.0/16",
    "100.64.0.0/10", "0.0.0.0/8", "240.0.0.0/4", "224.0.0.0/4",
]  # fmt: skip


@given(st.sampled_from(NOT_GLOBAL_V4).flatmap(lambda net: st.ip_addresses(network=net)))
def test_every_form_that_carries_a_non_public_ipv4_is_refused(v4: ipaddress.IPv4Address) -> None:
    forms: list[Address] = [
        v4,
        ipaddress.IPv6Address(f"::ffff:{v4}"),
        ipaddress.IPv6Address((0x64FF9B << 96) | int(v4)),
        ipaddress.IPv6Address((0x2002 << 112) | (int(v4) << 80)),
    ]
    for ip in forms:
        assert v4 in carried(ip)
        assert why_not(ip) is not None, ip
