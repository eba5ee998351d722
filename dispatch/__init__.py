"""dispatch: container jobs on a fleet of Docker hosts sharing one Redis.

The public surface for tools that enqueue from code; everything else is internal.
"""

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
