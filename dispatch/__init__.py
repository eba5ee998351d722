"""dispatch: container jobs on a fleet of Docker hosts sharing one Redis.

The public surface for tools that enqueue from code; everything else is internal.
"""

from dispatch.api import cancel, get, submit
from dispatch.api import list_jobs as list
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
from dispatch.queue.transitions import Enqueued

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
    "list",
    "new_id",
    "submit",
]
