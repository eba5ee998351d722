"""What a job's `waitFor` asks, read once per pickup: the latest `after` instant, the profiles
in the operator's order, and what this build cannot read.

A job's supersede identity is its dedup key, followed by the trigger that minted it when one
did; jobs without a dedup key have none and are never superseded. A check's target is the
job's target id: `owner/name#7` (or `owner/name`) for a forge job, the folder's path for a
local one; never a title or a body. A plain job has no target.

A condition this build cannot read makes the document undecodable (an unknown field of a
newer release): `unreadable_refusal` tells that case apart from a broken document, so the
processor refuses it `wait-unreadable` rather than `invalid-job`, before any gate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from dispatch.errors import InvalidJob
from dispatch.gates.base import Refuse
from dispatch.model import Job, decode_job, instant_ms
from dispatch.reasons import WAIT_UNREADABLE

TARGET = "{target}"


@dataclass(frozen=True, slots=True)
class Conditions:
    after_ms: int | None  # the latest `after`; None when there is none
    profiles: tuple[str, ...]
    unreadable: tuple[str, ...]  # `after` texts that do not parse as an instant


def conditions(job: Job) -> Conditions:
    afters: list[int] = []
    unreadable: list[str] = []
    profiles: list[str] = []
    for w in job.wait_for:
        if w.profile is not None:
            profiles.append(w.profile)
        elif (at := instant_ms(w.after or "")) is not None:
            afters.append(at)
        else:
            unreadable.append(w.after or "")
    return Conditions(max(afters, default=None), tuple(profiles), tuple(unreadable))


def identity(job: Job) -> str | None:
    if not job.dedup:
        return None
    return f"{job.dedup}#{job.trigger}" if job.trigger else job.dedup


def check_target(job: Job) -> str:
    if job.kind == "forge":
        return job.target()
    if job.kind == "local" and job.folder:
        return job.folder
    return ""


def label(c: Conditions) -> str:
    """The conditions in a few words, for logs and `dispatch why`."""
    parts = [f"`{name}`" for name in c.profiles]
    return ", ".join(parts) if parts else "an instant"


def unreadable_refusal(raw: bytes) -> Refuse | None:
    """A refusal for a document that is valid but for conditions this build cannot read."""
    try:
        document: Any = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    if not isinstance(document, dict) or not document.get("waitFor"):
        return None
    document["waitFor"] = []
    try:
        decode_job(msgspec.json.encode(document))
    except InvalidJob:
        return None  # broken apart from its conditions too: an invalid job
    return Refuse(
        WAIT_UNREADABLE,
        "the job's waitFor holds a condition this release cannot read (was it submitted by a"
        " newer release?), so it cannot be honoured; not run",
    )
