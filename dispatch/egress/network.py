"""The job network: an internal bridge dispatch creates and owns (`DISPATCH_JOB_NETWORK`).

`Internal: true` makes the engine drop every packet between the bridge and any other
interface (its FORWARD isolation rules), so a job has no route out of the host. It does not
stop a job from reaching the host itself: every address of the host (the gateway, docker0,
the LAN address) answers on the bridge, which is what `firewall.py` closes.
"""

from __future__ import annotations

import contextlib
import fcntl
import socket
import struct
from dataclasses import dataclass

from dispatch.egress.errors import EgressDown
from dispatch.runners.docker.client import DockerClient, Json
from dispatch.runners.docker.errors import ContainerConflict, NetworkMissing

OWNER_LABEL = "dispatch.network"  # marks a network dispatch made, for the operator's eyes
_BRIDGE_OPTION = "com.docker.network.bridge.name"


@dataclass(frozen=True, slots=True)
class JobNetwork:
    name: str
    gateway: str  # the host's address on the bridge: where the proxy listens
    bridge: str  # the host interface the firewall rules name
    internal: bool


def describe(info: Json) -> JobNetwork:
    """What an inspect says; EgressDown when it is not a bridge with an IPv4 gateway."""
    name = str(info.get("Name", "?"))
    if info.get("Driver") != "bridge":
        raise EgressDown(f"network {name} is not a bridge network")
    gateways = [c.get("Gateway") for c in (info.get("IPAM") or {}).get("Config") or []]
    gateway = next((g for g in gateways if g and ":" not in g), None)
    if gateway is None:
        raise EgressDown(f"network {name} has no IPv4 gateway")
    options = info.get("Options") or {}
    bridge = options.get(_BRIDGE_OPTION) or f"br-{str(info.get('Id', ''))[:12]}"
    return JobNetwork(name, gateway, bridge, bool(info.get("Internal")))


async def ensure(client: DockerClient, name: str) -> JobNetwork:
    """The job network, created internal when missing. EgressDown when one of that name exists
    but is not internal: dispatch never loosens or replaces a network it finds."""
    try:
        info = await client.network_inspect(name)
    except NetworkMissing:
        with contextlib.suppress(ContainerConflict):  # made meanwhile by another daemon
            await client.network_create(name, {OWNER_LABEL: "jobs"})
        info = await client.network_inspect(name)
    network = describe(info)
    if not network.internal:
        raise EgressDown(f"network {name} exists and is not internal: remove it or rename it")
    return network


_SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


def host_addresses() -> list[str]:
    """Every IPv4 address of this host but loopback: each one answers a job unless closed."""
    found = set()
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                packed = fcntl.ioctl(
                    s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15])
                )
            except OSError:  # no IPv4 address on it
                continue
        address = socket.inet_ntoa(packed[20:24])
        if not address.startswith("127."):
            found.add(address)
    return sorted(found)
