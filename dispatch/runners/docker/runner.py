"""The Docker runner: one admitted job attempt, run as one hardened container.

Lifecycle of `DockerRunner.run` (one container per call, named `dispatch-job-<id>`):

    plan        the folder the gates resolved and hold, still a directory under an allowed
                root, else refuse `folder-not-allowed`, and still where the job's folder
                resolves, else refuse `mount-mismatch` (a symlink re-pointed); the user
                (`user.py`: the folder's owner), else refuse
                `job-user-root`; no image named and no default, else refuse `image-missing`
    create      the body from `spec.py`: labels host / job / attempt / fence (the boot reaper
                reads them), no privileges; an image not on this host refuses `image-missing`
                (the create answers 404: images are never pulled, and nothing is created);
                engine unreachable -> error `docker-unavailable`
    wait        `condition=next-exit` registered BEFORE start, so a fast exit cannot be missed
    start       a local job's mount checked against its folder (`mounts.py`), else killed
                and refused `mount-mismatch`; then the output streams to `ctx.output_path`,
                capped, with a truncation mark
                (`dispatch.runners.output`: a disk that fails stops the output, not the run)
    exit        the exit code from the wait, or on `ctx.aborted`: stop (SIGTERM, then SIGKILL
                after `ctx.grace_s`); then an inspect, which also proves the engine stayed up
                through the exit. An abort that finds the container exited (the engine says
                not running, a stop answers 304, a kill 409) is no stop: the run ended by its
                own exit code, as if no abort had come (else it is handed back and runs again)
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
    remove      once the exit has been read, in the background: the container's process is
                gone and its mounts with it, so the run's holds (its folder among them) need
                not wait for the engine's cleanup, and a retry's create that meets the name
                removes it first. Any other end (never started, lost, a workspace mismatch:
                the container may still run) and a run cancelled half-way wait for the
                removal, in a shielded task. `settle()` waits for the removals under way

The runner reports what happened; the processor decides what it means
(`dispatch.runners.base.classify`). A container is stopped only when `ctx.signal` aborts the
run; how long to wait for that is the processor's, which past its `abort_wait_s` stops waiting
but leaves the run going (holds kept) until the container is gone. A run task cancelled all the
same (the loop closing) still has its container removed, in the shielded task `settle()` awaits.

The create body (what the container is made of, hardening included) is `spec.py`'s, pure; the
settings are `settings.py`'s, built once from the daemon's.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from dispatch.clock import Clock, SystemClock
from dispatch.config.units import limited
from dispatch.host.files import allowed_folder
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
from dispatch.runners.base import IsLive, RunContext, Runner, RunResult
from dispatch.runners.docker.attach import Attachment, RunLost
from dispatch.runners.docker.client import DockerClient, ExitWait, Json
from dispatch.runners.docker.errors import (
    ContainerConflict,
    ContainerNotFound,
    ContainerNotRunning,
    DockerError,
    DockerTimeout,
    DockerUnavailable,
    ImageMissing,
)
from dispatch.runners.docker.mounts import mismatch
from dispatch.runners.docker.reaper import reap
from dispatch.runners.docker.settings import DockerSettings
from dispatch.runners.docker.spec import Plan, container_config, container_name
from dispatch.runners.docker.usage_mount import with_usage
from dispatch.runners.docker.user import job_user
from dispatch.runners.output import OutputFile

SIGKILL_EXIT = 128 + 9
_OOM_EVENT = "oom"  # not a reason: what the engine calls the event


@dataclass(frozen=True)
class _Exit:
    code: int
    stopped: bool  # our own stop ended it
    started_ms: int
    ended_ms: int
    truncated: bool
    state: dict[str, Any]  # the container's State, inspected after the exit


STOP_ANSWER_S = 2.0  # after the exit, how long a stop call in flight may take to answer

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
        plan = self._plan(ctx.job, ctx.folder)
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
        return await self._run_then_remove(ctx, cid, plan.source)

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
        """Wait for the removals under way (runs that exited, and cancelled ones)."""
        while self._cleanups:
            await asyncio.gather(*self._cleanups, return_exceptions=True)

    def running_as(self, job_id: str) -> str:
        return f"container {container_name(job_id)}"

    async def kill_again(self, job_id: str) -> None:
        """The engine's kill, once more; one that finds the container gone or exited is done."""
        with contextlib.suppress(ContainerNotFound, ContainerNotRunning):
            await self.client.kill(container_name(job_id))

    def _plan(self, job: Job, folder: str | None = None) -> Plan | str:
        """The container's image, user and folder, or the refusal reason; asks the engine
        nothing, and runs right before the create (no await between). The folder is the one
        the gates resolved and hold (`folder`: `ctx.folder`); the job's must still resolve to it,
        else a symlink was re-pointed since and the run is refused `mount-mismatch`. The
        folder's owner is read here again although a gate read it: it is the owner at this
        moment that the container gets."""
        source = None
        if job.kind == "local":
            source = allowed_folder(folder or job.folder, self.settings.allowed_roots)
            if source is None:
                return FOLDER_NOT_ALLOWED
            if folder is not None and source != folder:
                return MOUNT_MISMATCH  # the held path itself is no longer a real folder
            if allowed_folder(job.folder, self.settings.allowed_roots) != source:
                event("folder_moved", job=job.id, folder=job.target())
                return MOUNT_MISMATCH
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

    async def _run_then_remove(self, ctx: RunContext, cid: str, source: str | None) -> RunResult:
        result: RunResult | None = None
        try:
            result = await self._run_created(ctx, cid, source)
            return result
        finally:
            if result is not None and result.exit_code is not None:  # its exit was read
                self._cleanup(cid)
            else:
                await self._dispose(cid)

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
        with contextlib.suppress(ContainerNotFound, ContainerNotRunning):
            await self.client.kill(cid)
        return True

    async def _follow(self, ctx: RunContext, attached: Attachment) -> _Exit:
        """From start to exit: capture output, and stop the container if the run is aborted."""
        started_ms = self.clock.now_ms()
        name = container_name(ctx.job.id)
        event("container_started", job=ctx.job.id, attempt=ctx.attempt, container=name)
        out = OutputFile(
            ctx.output_path, ctx.output_cap, ctx.job.id, hide=ctx.secrets.values(), tail=ctx.tail
        )
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
        stopping: asyncio.Future[bool] | None = None
        try:
            await asyncio.wait({exited, aborted}, return_when=asyncio.FIRST_COMPLETED)
            if exited.done() or await self._exited(cid):  # it ended before the abort came
                return await exited, False
            event("container_stopping", job=ctx.job.id, reason=ctx.abort_reason)
            stopping = asyncio.ensure_future(self._stop(cid, ctx))
            await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not stopping.done():  # it exited with our stop call in flight: let it answer
                await asyncio.wait({stopping}, timeout=STOP_ANSWER_S)
            code = await exited
            if stopping.done():
                return code, await stopping
            # the call hangs, though the engine saw the exit (a kill sent again by `dispatch
            # cancel --kill` ended it): the run is over; our signals are TERM and KILL
            return code, code in (128 + signal.SIGTERM, 128 + signal.SIGKILL)
        finally:
            for task in (aborted, exited, stopping):
                if task is not None:
                    task.cancel()

    async def _exited(self, cid: str) -> bool:
        """Whether the engine has the container's exit though our wait has not answered yet:
        an abort landing in that gap must not make a run that ended on its own a stopped one.
        One it cannot find is left to the stop, as before."""
        try:
            state = (await self.client.inspect(cid)).get("State", {})
        except ContainerNotFound:
            return False
        return state.get("Running") is False

    async def _state(self, cid: str) -> dict[str, Any]:
        """The State after an exit, asked on a new connection: an engine shutting down (and
        stopping its containers as it goes) does not answer it, so that exit is not believed.
        A container someone removed meanwhile has no State to give."""
        try:
            state: dict[str, Any] = (await self.client.inspect(cid, fresh=True)).get("State", {})
        except ContainerNotFound:
            return {}
        return state

    async def _stop(self, cid: str, ctx: RunContext) -> bool:
        """The engine's stop (TERM, KILL after the grace); a kill at once if the abort turns
        urgent meanwhile (the claim is lost: another host may already run this job). False
        when neither reached a running container: it had exited on its own."""
        stopping = asyncio.ensure_future(self._stop_gracefully(cid, ctx.grace_s))
        urgent = asyncio.ensure_future(ctx.signal.urgent.wait())
        try:
            await asyncio.wait({stopping, urgent}, return_when=asyncio.FIRST_COMPLETED)
            killed = False
            if not stopping.done():
                with contextlib.suppress(ContainerNotFound):
                    killed = await self._kill(cid)
            return await stopping or killed
        finally:
            urgent.cancel()

    async def _stop_gracefully(self, cid: str, grace_s: float) -> bool:
        """Whether this stop is what stopped it (a 304 says it had stopped already)."""
        try:
            return await self.client.stop(cid, grace_s)
        except ContainerNotFound:
            return True
        except DockerTimeout:  # the engine's own stop hung: kill outright; the TERM was sent
            await self._kill(cid)
            return True

    async def _kill(self, cid: str) -> bool:
        """Whether the kill reached a running container (a 409 says it was not running)."""
        try:
            await self.client.kill(cid)
        except ContainerNotRunning:
            return False
        return True

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
        await asyncio.shield(self._cleanup(cid))

    def _cleanup(self, cid: str) -> asyncio.Task[None]:
        """The container's removal, under way until `settle()` has seen it end."""
        task = asyncio.ensure_future(self._remove(cid))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        self.client.keep_open_for(task)
        return task

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
