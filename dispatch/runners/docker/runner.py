"""The Docker runner: one admitted job attempt, run as one hardened container.

Lifecycle of `DockerRunner.run` (one container per call, named `dispatch-job-<id>`):

    plan        folder under an allowed root (no symlink escape), else refuse `folder-not-allowed`;
                the user (`user.py`: the folder's owner), else refuse `job-user-root`; no image
                named and no default, else refuse `image-missing`
    create      labels host / job / attempt / fence (the boot reaper reads them), no privileges;
                an image not on this host refuses `image-missing` (the create answers 404:
                images are never pulled, and nothing is created); engine unreachable -> error
                `docker-unavailable`
    wait        `condition=next-exit` registered BEFORE start, so a fast exit cannot be missed
    start       a local job's mount checked against its folder (`mounts.py`), else killed
                and refused `mount-mismatch`; then the output streams to `ctx.output_path`,
                capped, with a truncation mark
                (`dispatch.runners.output`: a disk that fails stops the output, not the run)
    exit        the exit code from the wait, or on `ctx.aborted`: stop (SIGTERM, then SIGKILL
                after `ctx.grace_s`); then an inspect, which also proves the engine stayed up
                through the exit
    engine gone the wait, the stop or that inspect finds no engine (dockerd restarting): the
                run is re-adopted once the engine answers (`attach.py`: inspect, a new wait
                `condition=not-running`, the logs followed again) for at most
                `engine_wait_s`; a container that did not outlive the restart ends the run
                `engine-restarted` (infra: retried, never recorded completed)
    kill        a SIGKILL (137) is `oom` when State.OOMKilled says so or, because that flag is
                unreliable on cgroup v2, when the engine logged an `oom` event for the container
                (the engine derives it from the cgroup's memory events); else `stop-timeout` when
                our own stop had to kill it; else `sigkill` (someone else's kill, or an OOM the
                engine never saw)
    remove      once the exit has been read; also when the run is cancelled half-way, in a
                shielded task (`settle()` waits for those)

The runner reports what happened; the processor decides what it means
(`dispatch.runners.base.classify`). A container is stopped only when `ctx.signal` aborts the
run; how long to wait for that is the processor's, which past its `abort_wait_s` stops waiting
but leaves the run going (holds kept) until the container is gone. A run task cancelled all the
same (the loop closing) still has its container removed, in the shielded task `settle()` awaits.

Hardening: CapDrop ALL, no-new-privileges, a pids limit, Memory (swap capped to the same) and
NanoCpus from the job's size (the processor hands over the size its gates resolved; the
settings' defaults, 4g / 2 CPUs, cover a job run without gates), a non-root user (the folder's
owner for a local job, else 65534:65534; `user.py`) with a tmpfs HOME of its own, an init as
PID 1, a `nofile` ulimit, a read-only root with a tmpfs /tmp (opt-out: read_only=False), the
engine's log in the `local` driver, rotated and bounded, network configurable (None = the
engine's default bridge, "none" = no network; the daemon names its own internal job network and
passes `egress_env`, the egress proxy's variables, which a job must have to start), restart
policy `no`, auto-remove off (the exit must be read first). The job's env (its resolved
secrets included, `ctx.env()`) is passed through and never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from dispatch.clock import Clock, SystemClock
from dispatch.config.settings import from_env as settings_from_env
from dispatch.config.settings import parse_memory
from dispatch.config.units import limited
from dispatch.errors import ConfigError
from dispatch.log import event
from dispatch.model import Job
from dispatch.reasons import (
    ABORTED_BEFORE_START,
    CREATE_FAILED,
    DOCKER_ERROR,
    DOCKER_UNAVAILABLE,
    ENGINE_RESTARTED,
    FOLDER_NOT_ALLOWED,
    IMAGE_MISSING,
    JOB_SIZE_INVALID,
    JOB_USER_ROOT,
    MOUNT_MISMATCH,
    NOT_STARTED,
    OOM,
    SIGKILLED,
    START_FAILED,
    STOP_TIMEOUT,
    with_error,
)
from dispatch.runners.base import OUTPUT_CAP_BYTES, IsLive, RunContext, Runner, RunResult
from dispatch.runners.docker.attach import Attachment, RunLost
from dispatch.runners.docker.client import DockerClient, ExitWait, Json
from dispatch.runners.docker.errors import (
    ContainerConflict,
    ContainerNotFound,
    DockerError,
    DockerTimeout,
    DockerUnavailable,
    ImageMissing,
)
from dispatch.runners.docker.labels import (
    LABEL_ATTEMPT,
    LABEL_FENCE,
    LABEL_HOST,
    LABEL_JOB,
    NAME_PREFIX,
)
from dispatch.runners.docker.mounts import bind_mount, mismatch
from dispatch.runners.docker.reaper import reap
from dispatch.runners.docker.usage_mount import with_usage
from dispatch.runners.docker.user import HOME_DIR, TMPFS_OPTIONS, home_tmpfs, job_user
from dispatch.runners.output import OutputFile

SIGKILL_EXIT = 128 + 9
_OOM_EVENT = "oom"  # not a reason: what the engine calls the event
# The engine's log is only read while the run goes on, and bounded so that a job printing
# without end cannot fill the engine's disk: 3 files of 10 MiB, rotated by the `local` driver.
LOG_MAX_BYTES = 10 * 1024**2
LOG_FILES = 3
# Far above a shell's 1024 (builds and file watchers open many files), far below the engine's
# default of about a million, which some programs walk one by one when they close fds.
NOFILE_SOFT, NOFILE_HARD = 4096, 8192


@dataclass(frozen=True, kw_only=True)
class DockerSettings:
    allowed_roots: tuple[str, ...] = ()  # local folders must lie under one of these
    # The next three come from dispatch.config.Settings (see dispatch.runners.docker.factory).
    default_image: str | None = None  # for jobs that name no image
    default_memory: str = "4g"  # for jobs run without the size gate
    default_cpus: float = 2.0
    user: str | None = None  # None: the folder's owner, or nobody (user.py); "" = image's USER
    network: str | None = None  # None = the engine's default bridge
    read_only: bool = True  # the opt-out is for images that must write outside /tmp and HOME
    pids_limit: int = 512
    log_max_bytes: int = LOG_MAX_BYTES  # per log file of the engine's `local` driver
    workspace: str = "/work"  # where a local job's folder is mounted
    output_drain_s: float = 5.0  # how long the output may trail the exit
    engine_wait_s: float = 600.0  # how long a run waits for an engine gone mid-run to answer

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> DockerSettings:
        """The docker-only DISPATCH_* variables, as dispatch.config.settings parsed them.

        The engine's address is the client's (`resolve_host`: DOCKER_HOST); the image and the
        default job size are laid over these by dispatch.runners.docker.factory.
        """
        s = settings_from_env(env)
        return cls(
            allowed_roots=s.allowed_roots,
            user=s.container_user,  # set, even empty, it decides for every job
            network=s.owned_network or s.container_network,
            read_only=s.container_read_only,
            pids_limit=s.container_pids_limit,
            log_max_bytes=_log_max_bytes(s.container_log_size),
        )


def _log_max_bytes(size: int | None) -> int:
    if size is None:
        return LOG_MAX_BYTES
    if size * LOG_FILES < OUTPUT_CAP_BYTES:  # a re-adopted run re-reads the log from its start
        raise ConfigError(
            f"DISPATCH_CONTAINER_LOG_SIZE={size}: the engine must keep at least the output "
            f"cap ({OUTPUT_CAP_BYTES // 1024**2} MiB) in {LOG_FILES} files: use 3m or more"
        )
    return size


@dataclass(frozen=True, slots=True)
class Plan:
    """What a job's container is made of, decided before the engine is asked anything."""

    image: str
    user: str  # "" = the image's own USER
    source: str | None = None  # the resolved folder bound at the workspace
    env: tuple[str, ...] = ()  # the egress proxy's variables, after the job's own (they win)


def container_name(job_id: str) -> str:
    return NAME_PREFIX + job_id


def allowed_folder(folder: str | None, roots: tuple[str, ...]) -> str | None:
    """The folder's real path when it is a directory under an allowed root, else None.

    Both sides are resolved, so a symlink inside a root that points outside it is caught, and
    the resolved path is what gets mounted (a symlink swapped later changes nothing).
    """
    if not folder or not os.path.isabs(folder):
        return None
    real = os.path.realpath(folder)
    if not os.path.isdir(real):
        return None
    for root in roots:
        real_root = os.path.realpath(root)
        if os.path.commonpath([real, real_root]) == real_root:
            return real
    return None


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


@dataclass(frozen=True)
class _Exit:
    code: int
    stopped: bool  # our own stop ended it
    started_ms: int
    ended_ms: int
    truncated: bool
    state: dict[str, Any]  # the container's State, inspected after the exit


# job id -> the egress proxy's env for its container, None when it has no grant
EgressEnv = Callable[[str], list[str] | None]


class DockerRunner(Runner):
    def __init__(
        self,
        settings: DockerSettings,
        client: DockerClient,
        *,
        clock: Clock | None = None,
        egress_env: EgressEnv | None = None,
    ) -> None:
        """With `egress_env`, a job without the proxy's variables never starts."""
        self.settings = settings
        self.client = client
        self.clock: Clock = clock or SystemClock()
        self.egress_env = egress_env
        self._cleanups: set[asyncio.Task[None]] = set()

    async def run(self, ctx: RunContext) -> RunResult:
        if ctx.aborted.is_set():
            return RunResult(started=False, error=ABORTED_BEFORE_START)
        plan = self._plan(ctx.job)
        if isinstance(plan, str):
            return RunResult(started=False, refusal=plan)
        if self.egress_env is not None:
            proxy_env = self.egress_env(ctx.job.id)
            if proxy_env is None:  # no grant: the gates were skipped; never run unguarded
                return RunResult(started=False, error=with_error(NOT_STARTED, "no egress grant"))
            plan = replace(plan, env=tuple(proxy_env))
        try:
            config = with_usage(container_config(ctx, plan, self.settings), ctx)
        except (ValueError, OverflowError):  # a size outside the grammar or its bounds
            config = {}
        if not limited(config.get("HostConfig", {})):  # the last line of defence
            return RunResult(started=False, refusal=JOB_SIZE_INVALID)
        try:
            cid = await self._create(ctx, config)
        except ImageMissing:  # the create never pulls: its 404 is the image check
            return RunResult(started=False, refusal=IMAGE_MISSING)
        except DockerUnavailable as exc:
            event("docker_unavailable", job=ctx.job.id, error=str(exc))
            return RunResult(started=False, error=DOCKER_UNAVAILABLE)
        except DockerError as exc:
            event("container_create_failed", job=ctx.job.id, error=str(exc))
            return RunResult(started=False, error=with_error(CREATE_FAILED, exc))
        try:
            return await self._run_created(ctx, cid, plan.source)
        finally:
            await self._dispose(cid)

    async def preflight(self, job: Job) -> str:
        """Why `job` cannot start on this host ("" when it can); creates nothing.

        `run` finds the same reasons (the image's through the create's 404, saving a round
        trip); a caller may also ask before reserving anything for the job. Raises
        DockerUnavailable when the engine cannot be asked.
        """
        plan = self._plan(job)
        if isinstance(plan, str):
            return plan
        try:
            await self.client.image_inspect(plan.image)
        except ImageMissing:
            return IMAGE_MISSING
        return ""

    async def reap(self, host: str, is_live: IsLive) -> bool:
        """Stop and remove `host`'s containers that no live claim owns; False unless every one
        of them is known gone (unlisted, or one could not be removed)."""
        report = await reap(self.client, host, is_live)
        return report.listed and not report.failed

    async def settle(self) -> None:
        """Wait for removals left running by cancelled runs."""
        while self._cleanups:
            await asyncio.gather(*self._cleanups, return_exceptions=True)

    def _plan(self, job: Job) -> Plan | str:
        """The container's image, user and folder, or the refusal reason; asks the engine
        nothing. The folder's owner is read here again although a gate read it: it is the
        owner at this moment that the container gets."""
        source = None
        if job.kind == "local":
            source = allowed_folder(job.folder, self.settings.allowed_roots)
            if source is None:
                return FOLDER_NOT_ALLOWED
        try:
            user = job_user(source, self.settings.user)
        except OSError:  # gone since the check a moment ago
            return FOLDER_NOT_ALLOWED
        if user is None:
            return JOB_USER_ROOT
        image = job.image or self.settings.default_image
        if not image:
            return IMAGE_MISSING
        return Plan(image, user, source)

    async def _create(self, ctx: RunContext, config: Json) -> str:
        name = container_name(ctx.job.id)
        try:
            return await self.client.create_container(name, config)
        except ContainerConflict:
            # A leftover of an earlier attempt on this host: gone if stopped, else not ours to kill.
            state = (await self.client.inspect(name)).get("State", {})
            if state.get("Running"):
                raise
            await self.client.remove(name, force=True)
            return await self.client.create_container(name, config)

    async def _run_created(self, ctx: RunContext, cid: str, source: str | None) -> RunResult:
        name = container_name(ctx.job.id)
        try:
            waiter = await self.client.wait(cid, "next-exit")
        except DockerError as exc:
            return _never_started(ctx, name, exc)
        attached = Attachment(self.client, cid, waiter)
        if not ctx.may_start():
            await attached.aclose()
            return RunResult(started=False, error=ABORTED_BEFORE_START)
        try:
            try:
                await self.client.start(cid)
            except DockerError as exc:
                return _never_started(ctx, name, exc)
            if source is not None and await self._mounted_elsewhere(ctx, cid, source):
                return RunResult(started=True, refusal=MOUNT_MISMATCH, container=name)
            done = await self._follow(ctx, attached)
            kill = await self._kill_reason(cid, done)
        except (RunLost, DockerError) as exc:
            return _lost(ctx, name, exc, attached.output_lost)
        finally:
            await attached.aclose()
        event("container_exited", job=ctx.job.id, container=name, exit_code=done.code, kill=kill)
        return RunResult(
            started=True,
            exit_code=done.code,
            kill=kill,
            stopped=done.stopped,
            started_ms=done.started_ms,
            ended_ms=done.ended_ms,
            container=name,
            output=str(ctx.output_path),
            truncated=done.truncated,
            output_lost=attached.output_lost,
        )

    async def _mounted_elsewhere(self, ctx: RunContext, cid: str, source: str) -> bool:
        """Whether the started container's workspace is not the checked folder; killed if so.
        An engine that cannot answer raises, as it would a moment later in the run."""
        why = mismatch(await self.client.inspect(cid), source, self.settings.workspace)
        if not why:
            return False
        event("mount_mismatch", job=ctx.job.id, container=container_name(ctx.job.id), why=why)
        with contextlib.suppress(ContainerNotFound):
            await self.client.kill(cid)
        return True

    async def _follow(self, ctx: RunContext, attached: Attachment) -> _Exit:
        """From start to exit: capture output, and stop the container if the run is aborted."""
        started_ms = self.clock.now_ms()
        name = container_name(ctx.job.id)
        event("container_started", job=ctx.job.id, attempt=ctx.attempt, container=name)
        out = OutputFile(ctx.output_path, ctx.output_cap, ctx.job.id, hide=ctx.secrets.values())
        attached.capture(out)
        try:
            code, stopped, state = await self._await_exit(ctx, attached)
            ended_ms = self.clock.now_ms()
            await self._drained(attached, ctx)
        finally:
            out.close()
        return _Exit(code, stopped, started_ms, ended_ms, out.truncated, state)

    async def _await_exit(
        self, ctx: RunContext, attached: Attachment
    ) -> tuple[int, bool, dict[str, Any]]:
        """The exit code, whether our stop caused it, and the State; through engine restarts."""
        while True:
            try:
                code, stopped = await self._exit_or_stop(ctx, attached.cid, attached.waiter)
                return code, stopped, await self._state(attached.cid)
            except DockerUnavailable as exc:
                event("engine_lost_run", job=ctx.job.id, error=str(exc))
                await attached.readopt(self.settings.engine_wait_s, self.clock)
                event("container_readopted", job=ctx.job.id, container=container_name(ctx.job.id))

    async def _exit_or_stop(self, ctx: RunContext, cid: str, waiter: ExitWait) -> tuple[int, bool]:
        exited = asyncio.ensure_future(waiter.result())
        aborted = asyncio.ensure_future(ctx.aborted.wait())
        try:
            await asyncio.wait({exited, aborted}, return_when=asyncio.FIRST_COMPLETED)
            if exited.done():
                return exited.result(), False
            event("container_stopping", job=ctx.job.id, reason=ctx.abort_reason)
            await self._stop(cid, ctx)
            return await exited, True
        finally:
            aborted.cancel()
            exited.cancel()

    async def _state(self, cid: str) -> dict[str, Any]:
        """The State after an exit, asked on a new connection: an engine shutting down (and
        stopping its containers as it goes) does not answer it, so that exit is not believed.
        A container someone removed meanwhile has no State to give."""
        try:
            state: dict[str, Any] = (await self.client.inspect(cid, fresh=True)).get("State", {})
        except ContainerNotFound:
            return {}
        return state

    async def _stop(self, cid: str, ctx: RunContext) -> None:
        """The engine's stop (TERM, KILL after the grace); a kill at once if the abort turns
        urgent meanwhile (the claim is lost: another host may already run this job)."""
        stopping = asyncio.ensure_future(self._stop_gracefully(cid, ctx.grace_s))
        urgent = asyncio.ensure_future(ctx.signal.urgent.wait())
        try:
            await asyncio.wait({stopping, urgent}, return_when=asyncio.FIRST_COMPLETED)
            if not stopping.done():
                with contextlib.suppress(ContainerNotFound):
                    await self.client.kill(cid)
            await stopping
        finally:
            urgent.cancel()

    async def _stop_gracefully(self, cid: str, grace_s: float) -> None:
        try:
            await self.client.stop(cid, grace_s)
        except ContainerNotFound:
            pass
        except DockerTimeout:
            await self.client.kill(cid)  # the engine's own stop hung: kill outright

    async def _drained(self, attached: Attachment, ctx: RunContext) -> None:
        """Let the output catch up with the exit, for at most `output_drain_s`."""
        try:
            await attached.drained(self.settings.output_drain_s)
        except (TimeoutError, DockerError) as exc:
            event("output_incomplete", job=ctx.job.id, error=type(exc).__name__)

    async def _kill_reason(self, cid: str, done: _Exit) -> str | None:
        if done.code == 0:
            return None  # a clean exit is a clean exit, whatever happened to a child on the way
        state = done.state
        if state.get("OOMKilled"):
            return OOM
        if done.code != SIGKILL_EXIT:
            return None
        if await self._oom_event(cid, state):
            return OOM
        return STOP_TIMEOUT if done.stopped else SIGKILLED

    async def _oom_event(self, cid: str, state: dict[str, Any]) -> bool:
        """Whether the engine logged an OOM for the container during its run.

        The window is in the engine's own clock (StartedAt/FinishedAt); its end is a little past
        the exit because the OOM event can trail it, and an open-ended window would never close.
        """
        try:
            since_s = datetime.fromisoformat(state["StartedAt"]).timestamp() - 1
            until_s = datetime.fromisoformat(state["FinishedAt"]).timestamp() + 0.5
            found = await self.client.events(
                {"container": [cid], "event": [_OOM_EVENT]}, since_s, until_s
            )
        except (KeyError, ValueError, DockerError):
            return False
        return bool(found)

    async def _dispose(self, cid: str) -> None:
        """Remove the container; shielded, so a cancelled run still leaves nothing behind."""
        task = asyncio.ensure_future(self._remove(cid))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        await asyncio.shield(task)

    async def _remove(self, cid: str) -> None:
        try:
            await self.client.remove(cid, force=True)
        except ContainerNotFound:
            pass
        except DockerError as exc:
            event("container_remove_failed", container=cid[:12], error=str(exc))


def _lost(ctx: RunContext, name: str, exc: Exception, output_lost: bool) -> RunResult:
    """A run that started and whose exit could not be read, or not believed."""
    event("container_lost", job=ctx.job.id, container=name, error=str(exc))
    error = DOCKER_ERROR
    if isinstance(exc, RunLost):
        error = ENGINE_RESTARTED
    elif isinstance(exc, DockerUnavailable):
        error = DOCKER_UNAVAILABLE
    return RunResult(
        started=True,
        error=error,
        container=name,
        output=str(ctx.output_path),
        output_lost=output_lost,
    )


def _never_started(ctx: RunContext, name: str, exc: DockerError) -> RunResult:
    event("container_start_failed", job=ctx.job.id, container=name, error=str(exc))
    if isinstance(exc, DockerUnavailable):
        return RunResult(started=False, error=DOCKER_UNAVAILABLE, container=name)
    return RunResult(started=False, error=with_error(START_FAILED, exc), container=name)
