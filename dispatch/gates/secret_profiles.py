"""Secret-profile gate: every secret reference of the job names a profile this host's
secrets.json declares, else the job is refused `secret-profile-unknown`, before any slot, lease,
budget or container is taken. The values themselves are resolved only at start, after every gate
(dispatch.secrets.around_run): a gate must stay cheap, and a value must not exist longer than
the run.

A broken secrets.json keeps its last good copy (dispatch.config.watcher); the sentence then says
so, since the missing profile may be in the copy that did not load. The sentence names profiles,
never a reference's name.
"""

from __future__ import annotations

from dispatch.gates.base import ADMIT, Decision, Pickup, Refuse
from dispatch.reasons import SECRET_PROFILE_UNKNOWN

_FILE = "secrets.json"


class SecretProfileGate:
    name = "secret-profiles"

    async def check(self, pickup: Pickup) -> Decision:
        refs = pickup.job.secret_refs()
        if not refs:
            return ADMIT
        declared = pickup.config.secrets
        unknown = sorted({r.profile for r in refs.values()} - set(declared))
        if not unknown:
            return ADMIT
        sentence = f"{_FILE} on this host declares no profile {', '.join(map(repr, unknown))}"
        broken = pickup.config.errors.get(_FILE)
        if broken:
            sentence += f" (the file is broken, its last good copy is in use: {broken})"
        return Refuse(SECRET_PROFILE_UNKNOWN, sentence)
