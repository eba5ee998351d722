"""dispatch: container jobs on a fleet of Docker hosts sharing one Redis.

The public surface for tools that enqueue from code; everything else is internal. Each name is
imported when first asked for (PEP 562), so a command or `python -m dispatch.<module>` loads
only what it uses, not the client and redis-py behind it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dispatch.client import CancelAnswer, Client, JobView
    from dispatch.errors import (
        Conflict,
        DispatchError,
        InvalidJob,
        LockLost,
        NotFound,
        RedisUnavailable,
    )
    from dispatch.model import Job, RunRecord, Size, WaitFor, new_id
    from dispatch.oneshot import cancel, get, list_jobs, submit
    from dispatch.queue.transitions import Enqueued

_HOMES = {
    "dispatch.client": ("CancelAnswer", "Client", "JobView"),
    "dispatch.errors": (
        "Conflict",
        "DispatchError",
        "InvalidJob",
        "LockLost",
        "NotFound",
        "RedisUnavailable",
    ),
    "dispatch.model": ("Job", "RunRecord", "Size", "WaitFor", "new_id"),
    "dispatch.oneshot": ("cancel", "get", "list_jobs", "submit"),
    "dispatch.queue.transitions": ("Enqueued",),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "CancelAnswer",
    "Client",
    "Conflict",
    "DispatchError",
    "Enqueued",
    "InvalidJob",
    "Job",
    "JobView",
    "LockLost",
    "NotFound",
    "RedisUnavailable",
    "RunRecord",
    "Size",
    "WaitFor",
    "cancel",
    "get",
    "list_jobs",
    "new_id",
    "submit",
]


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'dispatch' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # asked once: later lookups skip this function
    return value
