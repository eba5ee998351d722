"""Host firewall rules that close the host to the job network, all but the proxy's port.

An internal network has no route out, but the host's own addresses still answer on its
bridge: a job could reach any service bound to all addresses (a Redis on 0.0.0.0:6379, an
SSH daemon, the engine's API on TCP). So dispatch puts these at the top of INPUT, tagged
with a comment naming the network and this daemon's host name (each daemon keeps its own):

    iptables  -I INPUT -i <bridge> -p tcp -d <gateway> --dport <proxy port> -j ACCEPT
    iptables  -I INPUT -i <bridge> -j REJECT         (everything else from a job)
    ip6tables -I INPUT -i <bridge> -j REJECT         (when ip6tables exists)

REJECT rather than DROP: a job learns at once that the way is closed instead of hanging.
Installing is idempotent (rules already in place are left; stale ones of the same tag are
removed first); `remove` deletes every rule carrying the tag.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
from dataclasses import dataclass

from dispatch.egress.errors import EgressDown

TAG = "dispatch-egress"
_TIMEOUT_S = 10.0


def tag(network: str, host: str) -> str:
    return f"{TAG} {network} {host}"


@dataclass(frozen=True, slots=True)
class Wanted:
    bridge: str
    gateway: str
    port: int
    comment: str

    def v4(self) -> list[list[str]]:
        mark = ["-m", "comment", "--comment", self.comment]
        to_proxy = ["-p", "tcp", "-d", f"{self.gateway}/32", "-m", "tcp"]
        return [
            ["-i", self.bridge, *to_proxy, "--dport", str(self.port), *mark, "-j", "ACCEPT"],
            ["-i", self.bridge, *mark, "-j", "REJECT"],
        ]

    def v6(self) -> list[list[str]]:
        return [["-i", self.bridge, "-m", "comment", "--comment", self.comment, "-j", "REJECT"]]


async def _run(*argv: str) -> str:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), _TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        raise EgressDown(f"{argv[0]}: {exc}") from None
    if proc.returncode != 0:
        raise EgressDown(f"{shlex.join(argv[:4])}: {err.decode(errors='replace').strip()}")
    return out.decode(errors="replace")


def tools() -> list[str]:
    """iptables, and ip6tables when present; EgressDown without iptables."""
    if shutil.which("iptables") is None:
        raise EgressDown("iptables not found: the host cannot be closed to jobs")
    return ["iptables"] + (["ip6tables"] if shutil.which("ip6tables") else [])


async def listed(tool: str) -> list[list[str]]:
    """INPUT's rules as argument lists, in order, without the leading `-A INPUT`."""
    text = await _run(tool, "-w", "5", "-S", "INPUT")
    rules = [shlex.split(line) for line in text.splitlines()]
    return [r[2:] for r in rules if r[:2] == ["-A", "INPUT"]]


def in_place(rules: list[list[str]], wanted: list[list[str]]) -> bool:
    """Every wanted rule is there, in order, and only dispatch's own rules come before them."""
    found = [i for want in wanted for i, rule in enumerate(rules) if _same(rule, want)]
    if len(found) != len(wanted) or found != sorted(found):
        return False
    return all(_comment(rule).startswith(TAG) for rule in rules[: found[0]])


_OPTIONS = ("-i", "-d", "-p", "--dport", "--comment", "-j")


def _key(rule: list[str]) -> tuple[str, ...]:
    """The options that make a rule ours: iptables prints them in an order of its own, and
    with defaults added (REJECT's --reject-with)."""
    return tuple(rule[rule.index(o) + 1] if o in rule[:-1] else "" for o in _OPTIONS)


def _same(rule: list[str], want: list[str]) -> bool:
    return _key(rule) == _key(want)


def _comment(rule: list[str]) -> str:
    return rule[rule.index("--comment") + 1] if "--comment" in rule else ""


async def check(wanted: Wanted) -> str:
    """ "" when every rule is in place, else what is missing."""
    for tool in tools():
        want = wanted.v4() if tool == "iptables" else wanted.v6()
        if not in_place(await listed(tool), want):
            return f"{tool}: the INPUT rules for {wanted.bridge} are missing or not first"
    return ""


async def install(wanted: Wanted) -> None:
    """Put the rules in place at the top of INPUT, unless they already are."""
    for tool in tools():
        want = wanted.v4() if tool == "iptables" else wanted.v6()
        if in_place(await listed(tool), want):
            continue
        await _remove(tool, wanted.comment)
        for rule in reversed(want):
            await _run(tool, "-w", "5", "-I", "INPUT", "1", *rule)


async def remove(comment: str) -> None:
    """Delete every rule whose comment starts with `comment` (a tag, or TAG + network)."""
    for tool in tools():
        await _remove(tool, comment)


async def _remove(tool: str, comment: str) -> None:
    for rule in await listed(tool):
        if _comment(rule).startswith(comment):
            await _run(tool, "-w", "5", "-D", "INPUT", *rule)
