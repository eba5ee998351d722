"""Who a job's container runs as, and the HOME it writes to.

The rule, when `DISPATCH_CONTAINER_USER` is not set:

    local job    the uid:gid that owns its resolved folder, so whatever the job writes there
                 belongs to the folder's owner (the operator), not to nobody. A folder owned by
                 root is refused `job-user-root`: a job never runs as root unasked. A group of 0
                 becomes 65534: the owner keeps its rights over its folder, and the root group's
                 rights over the image's files are not handed out with it.
    other jobs   65534:65534 (nobody): there is no folder whose owner could be meant.

`DISPATCH_CONTAINER_USER` set (even to an empty string) wins for every job, as given: empty is
the image's own USER, and `0` or `root` runs the job as root because the operator said so.

HOME is a tmpfs of the job's own at `HOME_DIR`: writable under the read-only root whatever the
image, empty at every run (nothing carried over from an earlier job), gone with the container,
and charged to the job's memory limit like any tmpfs page. For a numeric user it belongs to
that user (mode 0700); for a user given by name, whose uid only the image knows, it is open to
all (1777); with the image's own user the image's HOME is left alone.
"""

from __future__ import annotations

import os

DEFAULT_USER = "65534:65534"
NOBODY = 65534
HOME_DIR = "/home/dispatch"
# exec: agents run what they build or install under /tmp and HOME (Docker's default is noexec)
TMPFS_OPTIONS = "rw,exec,nosuid,nodev,size=512m"


def job_user(folder: str | None, configured: str | None) -> str | None:
    """The container user for a job on `folder` (its resolved path, None for a job without
    one), or None when the folder belongs to root and nothing asked for root. Stats the folder
    (OSError when it is gone)."""
    if configured is not None:
        return configured
    if folder is None:
        return DEFAULT_USER
    st = os.stat(folder)
    if st.st_uid == 0:
        return None
    return f"{st.st_uid}:{st.st_gid or NOBODY}"


def home_tmpfs(user: str) -> str | None:
    """The options of the tmpfs mounted at `HOME_DIR` for `user`; None for the image's user."""
    if not user:
        return None
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        return f"{TMPFS_OPTIONS},mode=1777"
    owner = f"uid={uid},gid={gid}" if gid else f"uid={uid}"
    return f"{TMPFS_OPTIONS},{owner},mode=0700"
