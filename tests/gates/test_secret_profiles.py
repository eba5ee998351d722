"""Secret-profile gate: an undeclared profile refuses the job before any hold is taken."""

from __future__ import annotations

import pytest

from dispatch.config.schemas import ConfigSnapshot, SecretProfile
from dispatch.gates.base import ADMIT, Refuse
from dispatch.gates.secret_profiles import SecretProfileGate
from dispatch.model import Job, SecretRef
from dispatch.reasons import SECRET_PROFILE_UNKNOWN
from tests.support.pickups import hold_names, pickup_of

pytestmark = pytest.mark.anyio

DECLARED = ConfigSnapshot(secrets={"vault": SecretProfile(command=["vault-read", "{name}"])})


def job(**refs: str) -> Job:
    return Job(
        id="j",
        command=["true"],
        env={"PLAIN": "x", **{k: SecretRef(secret=v) for k, v in refs.items()}},
    )


async def test_a_job_without_references_or_with_declared_profiles_is_admitted() -> None:
    gate = SecretProfileGate()
    assert await gate.check(pickup_of(job())) == ADMIT
    assert await gate.check(pickup_of(job(A="vault/a", B="vault/b"), config=DECLARED)) == ADMIT


async def test_an_undeclared_profile_is_refused_naming_profiles_not_names() -> None:
    pickup = pickup_of(job(A="vault/a", B="disk/private-name", C="zz/q"), config=DECLARED)
    decision = await SecretProfileGate().check(pickup)
    assert isinstance(decision, Refuse) and decision.reason == SECRET_PROFILE_UNKNOWN
    assert "'disk', 'zz'" in decision.sentence and "private-name" not in decision.sentence
    assert hold_names(pickup) == []


async def test_a_broken_secrets_file_is_named_in_the_sentence() -> None:
    broken = ConfigSnapshot(errors={"secrets.json": "line 3: expected ','"})
    decision = await SecretProfileGate().check(pickup_of(job(A="vault/a"), config=broken))
    assert isinstance(decision, Refuse)
    assert "the file is broken" in decision.sentence and "line 3" in decision.sentence
