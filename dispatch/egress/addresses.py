"""Where a name may lead a job through the egress proxy: only to the public internet.

A name (an exact rule's, or one below a wildcard's) is the job's to point anywhere: its DNS is
not the operator's. So every address it resolves to must be globally routable and not one of
this host's own; otherwise the proxy refuses it, whatever the rule. Only a rule that writes the
address itself (`10.0.0.5:443`, `[fd00::1]:8000`), or `localhost` (which RFC 6761 makes the
loopback by definition), reaches a private, loopback or link-local address: the operator named it.

An IPv6 address that carries an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`, 6to4 `2002::/16`,
NAT64 `64:ff9b::/96`, Teredo's client) is judged by that IPv4 address as well, so
`::ffff:127.0.0.1` or `64:ff9b::a9fe:a9fe` (the cloud metadata address) is refused like the
address it carries. "Not global" is the standard library's table (RFC 6890 and successors:
private, shared, loopback, link-local, documentation, benchmarking, reserved, unspecified);
multicast is refused on top. This host's own addresses (the job network's gateway, where the
proxy listens; its LAN and public addresses) are those the kernel lets a socket bind to.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import socket

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

NAT64 = ipaddress.ip_network("64:ff9b::/96")


def parse(text: str) -> Address:
    """An address as getaddrinfo gives it (a scope `%eth0` dropped)."""
    return ipaddress.ip_address(text.partition("%")[0])


def carried(ip: Address) -> list[Address]:
    """The address and every IPv4 address it carries."""
    found: list[Address] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            found.append(ip.ipv4_mapped)
        if ip.sixtofour is not None:
            found.append(ip.sixtofour)
        if ip.teredo is not None:
            found.append(ip.teredo[1])
        if ip in NAT64:
            found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def why_not(ip: Address) -> str | None:
    """Why a name may not lead here (`loopback`, `private`, `this host's own`, ...), or None."""
    for each in carried(ip):
        if each.is_unspecified:
            return "unspecified"
        if each.is_loopback:
            return "loopback"
        if each.is_link_local:
            return "link-local"
        if each.is_multicast:
            return "multicast"
        if not each.is_global:
            return "private or reserved"
    if own(ip):
        return "this host's own"
    return None


def own(ip: Address) -> bool:
    """Whether the kernel has this address on one of this host's interfaces."""
    family = socket.AF_INET6 if isinstance(ip, ipaddress.IPv6Address) else socket.AF_INET
    with contextlib.closing(socket.socket(family, socket.SOCK_DGRAM)) as probe:
        try:
            probe.bind((str(ip), 0))
        except OSError as exc:
            return exc.errno != errno.EADDRNOTAVAIL  # anything else: not sure, so refuse
    return True
