"""The container's create body: pure functions from a run's context, its plan and the settings
to the Engine API's create spec (no engine asked, no file read; testable without an engine).

Hardening: CapDrop ALL, no-new-privileges, a pids limit, Memory (swap capped to the same) and
NanoCpus from the job's size (the processor hands over the size its gates resolved; the
settings' defaults, 4g / 2 CPUs, cover a job run without gates), a non-root user (the folder's
owner for a local job, else 65534:65534; `user.py`) with a tmpfs HOME of its own, an init as
PID 1, a `nofile` ulimit, a read-only root with a tmpfs /tmp (opt-out: read_only=False), the
engine's log in the `local` driver, rotated and bounded, network configurable (None = the
engine's default bridge, "none" = no network; the daemon names its own internal job network and
passes `egress_env`, the egress proxy's variables, which a job must have to start), restart
policy `no`, auto-remove off (the exit must be read first). The job's env (its resolved
secrets included, `ctx.env()`) is passed through and never logged. The usage report's mount is
laid over this body by `usage_mount.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from dispatch.config.units import parse_memory
from dispatch.model import Job
from dispatch.runners.base import RunContext
from dispatch.runners.docker.client import Json
from dispatch.runners.docker.labels import (
    LABEL_ATTEMPT,
    LABEL_FENCE,
    LABEL_HOST,
    LABEL_JOB,
    NAME_PREFIX,
)
from dispatch.runners.docker.mounts import bind_mount
from dispatch.runners.docker.settings import LOG_FILES, DockerSettings
from dispatch.runners.docker.user import HOME_DIR, TMPFS_OPTIONS, home_tmpfs

# Far above a shell's 1024 (builds and file watchers open many files), far below the engine's
# default of about a million, which some programs walk one by one when they close fds.
NOFILE_SOFT, NOFILE_HARD = 4096, 8192


@dataclass(frozen=True, slots=True)
class Plan:
    """What a job's container is made of, decided before the engine is asked anything."""

    image: str
    user: str  # "" = the image's own USER
    source: str | None = None  # the resolved folder bound at the workspace
    env: tuple[str, ...] = ()  # the egress proxy's variables, after the job's own (they win)


def container_name(job_id: str) -> str:
    return NAME_PREFIX + job_id


def labels(ctx: RunContext) -> dict[str, str]:
    return {
        LABEL_HOST: ctx.host,
        LABEL_JOB: ctx.job.id,
        LABEL_ATTEMPT: str(ctx.attempt),
        LABEL_FENCE: ctx.fence,
    }


def host_config(job: Job, plan: Plan, s: DockerSettings) -> Json:
    size = job.size
    memory = parse_memory((size.memory if size else None) or s.default_memory)
    cpus = (size.cpus if size else None) or s.default_cpus
    config: Json = {
        "CapDrop": ["ALL"],
        "SecurityOpt": ["no-new-privileges"],
        "PidsLimit": s.pids_limit,
        "Memory": memory,
        "MemorySwap": memory,  # no swap on top: over the limit means OOM, not a crawl
        "NanoCpus": int(cpus * 1e9),
        "ReadonlyRootfs": s.read_only,
        "RestartPolicy": {"Name": "no"},
        "AutoRemove": False,
        "Init": True,  # a real PID 1: signals forwarded, orphans reaped
        "Ulimits": [{"Name": "nofile", "Soft": NOFILE_SOFT, "Hard": NOFILE_HARD}],
        "LogConfig": {
            "Type": "local",
            "Config": {"max-size": str(s.log_max_bytes), "max-file": str(LOG_FILES)},
        },
        "Tmpfs": _tmpfs(plan.user, s.read_only),
    }
    if plan.source is not None:
        config["Mounts"] = [bind_mount(plan.source, s.workspace)]
    if s.network:
        config["NetworkMode"] = s.network
    return config


def _tmpfs(user: str, read_only: bool) -> dict[str, str]:
    mounts = {"/tmp": TMPFS_OPTIONS} if read_only else {}
    home = home_tmpfs(user)
    if home is not None:
        mounts[HOME_DIR] = home
    return mounts


def container_config(ctx: RunContext, plan: Plan, s: DockerSettings) -> Json:
    job = ctx.job
    job_env = ctx.env()
    env = [f"{k}={v}" for k, v in job_env.items()] + list(plan.env)
    if home_tmpfs(plan.user) is not None and "HOME" not in job_env:
        env.insert(0, f"HOME={HOME_DIR}")
    config: Json = {
        "Image": plan.image,
        "Labels": labels(ctx),
        "Env": env,
        "HostConfig": host_config(job, plan, s),
    }
    if job.command:
        config["Cmd"] = list(job.command)
    if plan.user:
        config["User"] = plan.user
    if plan.source is not None:
        config["WorkingDir"] = s.workspace
    return config
