"""The egress guard: keeps the job network, the proxy and the firewall rules in place, and
hands each admitted job its credentials.

`refresh` (at start, then every `check_every_s` in `keep`) makes sure, in order: the network
exists and is internal (`network.py`), the proxy listens on its gateway (`proxy.py`), and the
INPUT rules are first (`firewall.py`). `problem` says what is missing, "" when nothing is: the
egress gate holds jobs `egress-unavailable` while it is not "". An engine that cannot be asked
leaves the last answer standing (its jobs meet `engine-unavailable` in the runner instead).

A grant is per attempt: a random token, known only to this process and the container's env,
revoked when the attempt ends. Its rules are read from the live config on every connection,
so an edit of egress.json also narrows the jobs already running.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from dispatch.config.schemas import ConfigSnapshot
from dispatch.egress import firewall
from dispatch.egress.errors import EgressDown
from dispatch.egress.network import JobNetwork, ensure
from dispatch.egress.proxy import EgressProxy, Grant
from dispatch.egress.relay import Limits
from dispatch.egress.rules import Rule, endpoint_rule, parse_rule
from dispatch.log import event
from dispatch.runners.docker.client import DockerClient
from dispatch.runners.docker.errors import DockerError, DockerUnavailable
from dispatch.runners.docker.labels import LABEL_HOST

NO_PROXY = "localhost,127.0.0.1,::1"


@dataclass(frozen=True)
class GuardSettings:
    network: str
    port: int  # 0: any free port
    host: str  # this daemon's host name: tags its firewall rules
    check_every_s: float = 5.0
    limits: Limits = field(default_factory=Limits)


class EgressGuard:
    def __init__(
        self, settings: GuardSettings, client: DockerClient, config: Callable[[], ConfigSnapshot]
    ) -> None:
        self.s = settings
        self.client = client
        self.config = config
        self.grants: dict[str, Grant] = {}
        self.proxy = EgressProxy(self.grants, settings.limits)
        self.network: JobNetwork | None = None
        self.port: int | None = None
        self.problem = "not checked yet"
        self._parsed: tuple[tuple[str, ...], tuple[Rule, ...]] = ((), ())

    @property
    def comment(self) -> str:
        return firewall.tag(self.s.network, self.s.host)

    async def refresh(self) -> None:
        try:
            await self._ensure()
            problem = ""
        except DockerUnavailable:
            return  # the engine's absence is the runner's to report
        except (EgressDown, DockerError, OSError) as exc:
            problem = str(exc) or type(exc).__name__
        if problem != self.problem:
            event("egress_ready" if not problem else "egress_unavailable", problem=problem)
        self.problem = problem

    async def _ensure(self) -> None:
        network = await ensure(self.client, self.s.network)
        if network != self.network or not self.proxy.serving:
            await self.proxy.close()
            self.network = network
            self.port = await self._listen(network.gateway)
        assert self.port is not None
        self.proxy.summary = f"{len(self.config().egress)} allowed hosts in egress.json"
        await firewall.install(
            firewall.Wanted(network.bridge, network.gateway, self.port, self.comment)
        )

    async def _listen(self, gateway: str) -> int:
        port = self.s.port or self.port or 0  # an ephemeral port is kept across restarts
        try:
            return await self.proxy.start(gateway, port)
        except OSError as exc:
            raise EgressDown(
                f"the proxy cannot listen on {gateway}:{port}: {exc.strerror}"
            ) from None

    async def keep(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.s.check_every_s)
            if not stop.is_set():
                await self.refresh()

    async def close(self) -> None:
        """Stop the proxy; remove this daemon's rules once none of its containers run."""
        await self.proxy.close()
        try:
            running = await self.client.list_containers({LABEL_HOST: self.s.host}, all=False)
            if not running:
                await firewall.remove(self.comment)
        except (DockerError, EgressDown) as exc:
            event("egress_rules_left", error=str(exc))

    def grant(self, job: str, model: str | None, narrow: tuple[str, ...]) -> Grant:
        narrowed = tuple(parse_rule(text) for text in narrow)
        grant = Grant(job, secrets.token_urlsafe(24), lambda: self._rules(model), narrowed)
        self.grants[job] = grant
        return grant

    def revoke(self, job: str, grant: Grant) -> None:
        if self.grants.get(job) is grant:
            del self.grants[job]

    def env(self, job: str) -> list[str] | None:
        """The proxy variables for the job's container; None without a grant (never unguarded)."""
        grant = self.grants.get(job)
        if grant is None or self.network is None or self.port is None:
            return None
        url = f"http://{job}:{grant.token}@{self.network.gateway}:{self.port}"
        pairs = {"HTTPS_PROXY": url, "HTTP_PROXY": url, "NO_PROXY": NO_PROXY}
        return [f"{k}={v}" for name, v in pairs.items() for k in (name, name.lower())]

    def _rules(self, model: str | None) -> tuple[Rule, ...]:
        """egress.json's hosts, and the endpoints serving the job's model, as of now."""
        snapshot = self.config()
        if self._parsed[0] is not snapshot.egress:
            rules = (r for text in snapshot.egress if (r := _rule(text)) is not None)
            self._parsed = (snapshot.egress, tuple(rules))
        serving = [e.host for e in snapshot.endpoints if model is not None and model in e.models]
        extra = (r for host in serving if (r := endpoint_rule(host)) is not None)
        return (*self._parsed[1], *extra)


def _rule(text: str) -> Rule | None:
    try:
        return parse_rule(text)
    except ValueError:  # the watcher refuses such a file; a rule it let through is never wider
        return None
