"""How dispatch marks its containers: a name prefix and four labels.

Apart from the runner so the reaper can read what the runner writes without importing it (the
runner calls the reaper at boot).
"""

from __future__ import annotations

NAME_PREFIX = "dispatch-job-"
LABEL_HOST = "dispatch.host"
LABEL_JOB = "dispatch.job"
LABEL_ATTEMPT = "dispatch.attempt"
LABEL_FENCE = "dispatch.fence"

__all__ = ["LABEL_ATTEMPT", "LABEL_FENCE", "LABEL_HOST", "LABEL_JOB", "NAME_PREFIX"]
