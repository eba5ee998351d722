"""Secret-profile gate: every secret reference of the job names a profile this host's
secrets.json declares, before any slot, lease, budget or container is taken. The values
themselves are resolved only at start, after every gate (dispatch.secrets.around_run): a gate
must stay cheap, and a value must not exist longer than the run.

A profile this host lacks is not the end of a job on the shared queue, where another host may
declare it (each host's heartbeat names its profiles, never a value or a path): while some
live host does, the job is deferred `secret-profile-elsewhere`, the sentence naming the
profile and those hosts, and one of them takes it. When no live host declares it, the job is
deferred once more and refused `secret-profile-unknown` only if, at least `CONFIRM_MS` later,
still none does: a host restarting is not mistaken for a profile gone. On a host's own queue
(`jobs@<host>`) no other host may run the job, and it is refused at once.

A broken secrets.json keeps its last good copy (dispatch.config.watcher); the sentence then says
so, since the missing profile may be in the copy that did not load. The sentence names profiles,
never a reference's name.
"""

from __future__ import annotations

from dispatch.clock import Clock
from dispatch.fleet.hosts import DeclaredProfiles
from dispatch.gates.base import ADMIT, Decision, Defer, Pickup, Refuse
from dispatch.reasons import (
    SECRET_ELSEWHERE_DELAY_MS,
    SECRET_PROFILE_ELSEWHERE,
    SECRET_PROFILE_UNKNOWN,
)

_FILE = "secrets.json"
CONFIRM_MS = 30_000  # how far apart the two looks that find no host declaring it must be
_MOST_PENDING = 10_000  # jobs whose first look found none, remembered (oldest go first)


class SecretProfileGate:
    name = "secret-profiles"

    def __init__(self, declared: DeclaredProfiles | None = None, clock: Clock | None = None):
        self.declared = declared  # None: this host alone decides (tests of the other gates)
        self.clock = clock
        self._first_miss: dict[str, int] = {}  # job id -> when no live host declared it

    async def check(self, pickup: Pickup) -> Decision:
        if not pickup.job.has_secret_refs():  # most jobs: no dict built to find it empty
            return ADMIT
        refs = pickup.job.secret_refs().values()
        unknown = {r.profile for r in refs} - set(pickup.config.secrets)
        if not unknown:
            return ADMIT
        names = ", ".join(map(repr, sorted(unknown)))
        sentence = f"{_FILE} on this host declares no profile {names}"
        broken = pickup.config.errors.get(_FILE)
        if broken:
            sentence += f" (the file is broken, its last good copy is in use: {broken})"
        if self.declared is None or self.clock is None or "@" in pickup.claim.queue:
            return Refuse(SECRET_PROFILE_UNKNOWN, sentence)
        return await self._elsewhere(pickup.job.id, unknown, sentence)

    async def _elsewhere(self, job_id: str, unknown: set[str], sentence: str) -> Decision:
        assert self.declared is not None and self.clock is not None
        hosts = await self.declared.hosts_with(unknown)
        now = self.clock.now_ms()
        if hosts:
            self._first_miss.pop(job_id, None)
            return Defer(
                SECRET_ELSEWHERE_DELAY_MS,
                SECRET_PROFILE_ELSEWHERE,
                detail=f"{sentence}; {_on(hosts)} do",
            )
        first = self._first_miss.setdefault(job_id, now)
        if now - first >= CONFIRM_MS:
            del self._first_miss[job_id]
            return Refuse(SECRET_PROFILE_UNKNOWN, f"{sentence}, nor does any live host")
        while len(self._first_miss) > _MOST_PENDING:
            del self._first_miss[next(iter(self._first_miss))]
        detail = f"{sentence}, nor does any live host now; looking again before refusing it"
        return Defer(CONFIRM_MS, SECRET_PROFILE_ELSEWHERE, detail=detail)


def _on(hosts: list[str]) -> str:
    shown = ", ".join(hosts[:5]) + (f" and {len(hosts) - 5} more" if len(hosts) > 5 else "")
    return f"host{'s' if len(hosts) > 1 else ''} {shown}"
