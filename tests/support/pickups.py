"""Claims and pickups as the processor makes them, for the gate and processor tests."""

from __future__ import annotations

import os
from typing import Any

from dispatch.gates.base import Pickup
from dispatch.model import Job, encode_job
from dispatch.queue.transitions import Claim


def claim_of(job: Job, stalls: int = 0) -> Claim:
    """The first attempt's claim of `job` on its own queue."""
    return Claim(job.queue, job.id, "h:1", 1, stalls, 0, encode_job(job))


def pickup_of(job: Job, **fields: Any) -> Pickup:
    """A pickup of `job`; `fields` set what the processor or earlier gates would. A local
    job's folder is resolved as the folder gate would (gates/folder.py), unless given."""
    if job.kind == "local" and job.folder and "folder" not in fields:
        fields["folder"] = os.path.realpath(job.folder)
    return Pickup(claim_of(job), job, **fields)


def hold_names(p: Pickup) -> list[str]:
    return [name for name, _ in p.holds]
