"""`dispatch doctor`'s egress lines: is the job network closed, and does its proxy answer?

    job-network      exists and is internal (missing: the daemon creates it; a warning)
    egress-proxy     answers on the gateway (a 407 naming the allow-list's size); not answering
                     is a warning: no daemon runs here, and with none, no job runs either
    firewall         this daemon's INPUT rules are in place and first (checked while it runs)
    redis-isolation  a throwaway container on the job network cannot open a TCP connection to
                     Redis's port on any address of this host, nor on Redis's own host

Jobs on a network the operator named (`DISPATCH_CONTAINER_NETWORK`) get one line saying the
network is theirs to keep closed. A check that needs an earlier one is left out when it failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from urllib.parse import urlsplit

from dispatch.cli.doctor.checks import Check
from dispatch.config.settings import Settings
from dispatch.egress import firewall
from dispatch.egress.errors import EgressDown
from dispatch.egress.network import JobNetwork, describe, host_addresses
from dispatch.runners.docker import DockerClient, DockerError, NetworkMissing

_PROBE_TIMEOUT_S = 5.0


async def egress_checks(settings: Settings) -> list[Check]:
    name = settings.owned_network
    if settings.runner != "docker":
        return []
    if name is None:
        named = settings.container_network
        return [
            Check("job-network", True, f"{named}: named by the operator, theirs to close", True)
        ]
    async with DockerClient(timeout_s=10) as client:
        try:
            network = describe(await client.network_inspect(name))
        except NetworkMissing:
            return [Check("job-network", True, f"{name} not made yet: the daemon makes it", True)]
        except (DockerError, EgressDown) as exc:
            return [Check("job-network", False, f"{name}: {exc}")]
        return await _on(client, settings, network)


async def _on(client: DockerClient, settings: Settings, network: JobNetwork) -> list[Check]:
    if not network.internal:
        return [Check("job-network", False, f"{network.name} is not internal: jobs could leave")]
    where = f"{network.name} internal, gateway {network.gateway}, bridge {network.bridge}"
    checks = [Check("job-network", True, where)]
    comment = firewall.tag(network.name, settings.host)
    port = await _rule_port(comment) or settings.egress_port
    answer = await _proxy_answer(network.gateway, port)
    if not answer:
        checks.append(
            Check("egress-proxy", True, f"no answer at {network.gateway}:{port}: no daemon?", True)
        )
        return checks
    checks.append(Check("egress-proxy", True, f"answers at {network.gateway}:{port}: {answer}"))
    checks.append(
        await _firewall_check(firewall.Wanted(network.bridge, network.gateway, port, comment))
    )
    if checks[-1].ok:
        checks.append(await _isolation_check(client, settings, network))
    return checks


async def _rule_port(comment: str) -> int:
    """The proxy's port as this daemon's ACCEPT rule names it (DISPATCH_EGRESS_PORT=0)."""
    with contextlib.suppress(EgressDown):
        for rule in await firewall.listed("iptables"):
            if comment in rule and "--dport" in rule:
                return int(rule[rule.index("--dport") + 1])
    return 0


async def _proxy_answer(gateway: str, port: int) -> str:
    """The proxy's line for a caller without credentials, "" when nothing answers so."""
    if not port:
        return ""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(gateway, port), _PROBE_TIMEOUT_S
        )
        writer.write(b"GET http://doctor.invalid/ HTTP/1.1\r\nHost: doctor.invalid\r\n\r\n")
        raw = await asyncio.wait_for(reader.read(4096), _PROBE_TIMEOUT_S)
        writer.close()
    except (OSError, TimeoutError):
        return ""
    head, _, body = raw.decode(errors="replace").partition("\r\n\r\n")
    if not head.startswith("HTTP/1.1 407"):
        return ""
    return body.strip().removeprefix("dispatch egress proxy: ")


async def _firewall_check(wanted: firewall.Wanted) -> Check:
    try:
        missing = await firewall.check(wanted)
    except EgressDown as exc:
        return Check("firewall", False, str(exc))
    if missing:
        return Check("firewall", False, missing)
    return Check("firewall", True, f"INPUT from {wanted.bridge}: only {wanted.port}/tcp")


async def _isolation_check(client: DockerClient, settings: Settings, network: JobNetwork) -> Check:
    targets = _redis_targets(settings.redis_url)
    if not targets:
        return Check("redis-isolation", True, "Redis is on a unix socket: no address to reach")
    script = "; ".join(f"nc -w 2 {a} {p} </dev/null && echo open-{a}:{p}" for a, p in targets)
    try:
        code, out = await _throwaway(client, settings.image, network.name, script + "; echo done")
    except DockerError as exc:
        return Check("redis-isolation", True, f"cannot check: {exc}", True)
    if "done" not in out:
        return Check("redis-isolation", True, f"cannot check: {settings.image} has no sh/nc", True)
    opened = [w.removeprefix("open-") for w in out.split() if w.startswith("open-")]
    if opened:
        return Check("redis-isolation", False, f"a job reaches Redis at {', '.join(opened)}")
    return Check("redis-isolation", True, f"closed on {len(targets)} addresses (exit {code})")


def _redis_targets(url: str) -> list[tuple[str, int]]:
    parts = urlsplit(url)
    if parts.scheme == "unix" or parts.hostname is None:
        return []
    port = parts.port or 6379
    addresses = set(host_addresses())
    with contextlib.suppress(OSError):
        addresses |= {
            str(i[4][0]) for i in socket.getaddrinfo(parts.hostname, port, socket.AF_INET)
        }
    return [(a, port) for a in sorted(addresses) if not a.startswith("127.")]


async def _throwaway(
    client: DockerClient, image: str, network: str, script: str
) -> tuple[int, str]:
    config = {
        "Image": image,
        "Cmd": ["sh", "-c", script],
        "Labels": {"dispatch.doctor": "redis-isolation"},
        "HostConfig": {"NetworkMode": network, "CapDrop": ["ALL"], "AutoRemove": False},
    }
    cid = await client.create_container(f"dispatch-doctor-{secrets.token_hex(4)}", config)
    try:
        waiter = await client.wait(cid, "next-exit")
        await client.start(cid)
        code = await waiter.result()
        out = b"".join([chunk async for chunk in client.logs(cid, follow=False)])
    finally:
        await client.remove(cid, force=True)
    return code, out.decode(errors="replace")
