"""The allow-list grammar: which host and port a job may reach through the egress proxy.

    api.example.com         that name, on ports 80 and 443
    api.example.com:8443    that name, on that port only
    *.example.com           any name below example.com (not example.com itself), 80 and 443
    10.1.2.3:8000           an IPv4 address; [fd00::1]:8000 an IPv6 one

Names are compared lower-case, without a trailing dot. A rule without a port means the web's
two ports, not every port: an allowed name must not become a way to its SSH or database port.
This module imports nothing of dispatch, so the job model can check `--egress` with it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

WEB_PORTS = (80, 443)
_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*", re.ASCII)
_PORT = re.compile(r"[0-9]{1,5}", re.ASCII)
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Rule:
    host: str  # lower-case name or address, without "*." or brackets
    wildcard: bool = False
    port: int | None = None  # None: 80 and 443
    # a model endpoint's host: where the operator said its model server is, so the proxy lets
    # its name lead to a private address (dispatch/egress/addresses.py)
    endpoint: bool = False

    def matches(self, host: str, port: int) -> bool:
        if port not in ((self.port,) if self.port is not None else WEB_PORTS):
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        text = f"*.{host}" if self.wildcard else host
        return text if self.port is None else f"{text}:{self.port}"


def normal_host(host: str) -> str:
    """A request's host as rules compare it: lower-case, no trailing dot, no brackets."""
    return host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")


def parse_port(text: str) -> int:
    if not _PORT.fullmatch(text) or not 1 <= int(text) <= 65535:
        raise ValueError(f"port {text!r} is not 1 to 65535")
    return int(text)


def parse_rule(text: str) -> Rule:
    """One allow-list entry; ValueError with a one-line reason when it is not one."""
    raw = text.strip().lower()
    wildcard = raw.startswith("*.")
    rest = raw[2:] if wildcard else raw
    host, port = _split_port(rest)
    if is_address(host):
        if wildcard:
            raise ValueError(f"{text!r}: a wildcard takes a name, not an address")
    elif len(host) > 253 or not _NAME.fullmatch(host.rstrip(".")):
        raise ValueError(f"{text!r} is not a host name, an address, or *.name (with :port)")
    return Rule(normal_host(host), wildcard, port)


def _split_port(text: str) -> tuple[str, int | None]:
    if text.startswith("["):  # [v6] or [v6]:port
        host, _, tail = text[1:].partition("]")
        if tail and not tail.startswith(":"):
            raise ValueError(f"{text!r} is not [address] or [address]:port")
        return host, parse_port(tail[1:]) if tail else None
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, parse_port(port)
    return text, None


def is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def parse_rules(texts: Iterable[str]) -> tuple[Rule, ...]:
    return tuple(parse_rule(text) for text in texts)


def allows(rules: Iterable[Rule], host: str, port: int) -> Rule | None:
    """The first rule that lets `host:port` through, None when none does."""
    name = normal_host(host)
    return next((rule for rule in rules if rule.matches(name, port)), None)


def endpoint_rule(address: str) -> Rule | None:
    """The rule for a model endpoint's `host` ("http://10.0.0.5:8000/v1", "localhost:11434"),
    None when it names no host dispatch can read."""
    text = address.strip()
    if "://" not in text:
        try:
            return replace(parse_rule(text), endpoint=True)
        except ValueError:
            return None
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return None
    if not host or port is None:
        return None
    return Rule(normal_host(host), False, port, endpoint=True)
