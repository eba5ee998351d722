"""What a container run through DockerRunner costs next to plain ways of running the same spec.

    python -m bench.container [--runs 20] [--image dispatch-test:latest] [--steps] [--json]

The spec is the runner's own: `hardened_body` runs `DockerRunner.run` on a client whose create
records the body and goes no further, so the plan, `spec.py`, the usage mount and the limits
check all have their say and nothing is rebuilt here (the three ways cannot drift apart). The
job is a local one, `true` on a folder of its own (owned by nobody when the bench runs as root),
with a usage dir, on an internal bridge network the bench makes as the daemon makes its job
network (`dispatch-bench-<pid>`, removed at the end). The hardening in that body: an init,
a read-only root, tmpfs /tmp and HOME, CapDrop ALL and no-new-privileges, memory, CPU and
pids limits, the nofile ulimit, the `local` log driver, the job network, the folder and usage
binds, a non-root user.

Three ways, interleaved round by round so drift in the engine hits all alike (each round
starting one way later than the last):

    runner  DockerRunner.run: plan, create, wait-before-start, start, the folder's mount check
            (an inspect), log capture, exit, the State on a fresh connection: until its result,
            which is when the daemon frees the job's slot and holds. An exited container is
            removed in the background; the bench awaits that (`settle`) before the next way,
            and reports the time until it ended too (`runner_removed`: the same work as the
            other two ways)
    cli     `docker run --rm` with that body as flags (`cli_args`; a field it does not know
            stops the bench rather than being left out)
    api     the bare Engine API calls with that body: create, wait(next-exit), start, remove

`--steps` measures instead what each hardening step costs on its own: the api way with the
whole body and with one step taken out of it at a time (`STEPS`, bench-only transformations
of the body), interleaved; each step's delta is the whole body's median less that variant's.

One untimed warm-up round first. Prints medians in ms and the ratios runner/cli and runner/api
(targets: runner/api <= 1.03, runner/cli <= 1.0); with `--steps`, each step's median and delta.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.support.output import print_figures
from dispatch.log import log
from dispatch.model import Job
from dispatch.runners.base import RunContext
from dispatch.runners.docker import DockerClient, DockerError, DockerRunner, DockerSettings
from dispatch.runners.docker.client import Json
from dispatch.runners.docker.labels import LABEL_JOB

Way = Callable[[], Awaitable[float | None]]  # a way may time its own figure, in ms
BENCH_HOST = "bench"


class _Captured(DockerError):
    """The create body is in hand: the run stops before the engine is asked to create."""


class _Recorder(DockerClient):
    body: Json | None = None

    async def create_container(self, name: str, config: Json) -> str:
        self.body = copy.deepcopy(config)
        raise _Captured(name)


async def hardened_body(
    settings: DockerSettings, ctx: RunContext, egress_env: list[str] | None = None
) -> Json:
    """The create body DockerRunner sends for `ctx`, taken from its own `run`; nothing is made.
    `egress_env`: the proxy's variables, as the daemon's egress guard hands them out."""
    recorder = _Recorder()
    try:
        runner = DockerRunner(
            settings, recorder, egress_env=None if egress_env is None else lambda _: egress_env
        )
        result = await runner.run(ctx)
    finally:
        await recorder.aclose()
    if recorder.body is None:
        raise RuntimeError(f"the runner created nothing: {result}")
    return recorder.body


def renamed(body: Json, job_id: str) -> Json:
    """The body for another container: a deep copy with the job label of `job_id`."""
    fresh = copy.deepcopy(body)
    fresh["Labels"] = {**fresh.get("Labels", {}), LABEL_JOB: job_id}
    return fresh


# -- the body as `docker run` flags ------------------------------------------------------------

_TOP = {"Image", "Cmd", "Labels", "Env", "User", "WorkingDir", "HostConfig"}


def cli_args(body: Json) -> list[str]:
    """`docker run` flags for the body (with --rm: the CLI's own removal); a field this does not
    know raises, so a new hardening field cannot go missing from the comparison."""
    unknown = set(body) - _TOP
    if unknown:
        raise ValueError(f"cli_args does not know {sorted(unknown)}")
    args = [f"--label={k}={v}" for k, v in body.get("Labels", {}).items()]
    args += [f"--env={e}" for e in body.get("Env", [])]
    if "User" in body:
        args.append(f"--user={body['User']}")
    if "WorkingDir" in body:
        args.append(f"--workdir={body['WorkingDir']}")
    args += _host_args(body.get("HostConfig", {}))
    return ["--rm", *args, body["Image"], *body.get("Cmd", [])]


def _host_args(host: Json) -> list[str]:
    args: list[str] = []
    for key, value in host.items():
        flag = _HOST_FLAGS.get(key)
        if flag is None:
            raise ValueError(f"cli_args does not know HostConfig.{key}")
        args += flag(value)
    return args


def _tmpfs(mounts: dict[str, str]) -> list[str]:
    return [f"--tmpfs={path}:{options}" for path, options in mounts.items()]


def _mounts(mounts: list[Json]) -> list[str]:
    def one(m: Json) -> str:
        ro = ",readonly" if m.get("ReadOnly") else ""
        return f"--mount=type={m['Type']},source={m['Source']},target={m['Target']}{ro}"

    return [one(m) for m in mounts]


def _log(config: Json) -> list[str]:
    opts = [f"--log-opt={k}={v}" for k, v in config.get("Config", {}).items()]
    return [f"--log-driver={config['Type']}", *opts]


def _restart(policy: Json) -> list[str]:
    return [f"--restart={policy['Name']}"]


_HOST_FLAGS: dict[str, Callable[[Any], list[str]]] = {
    "CapDrop": lambda caps: [f"--cap-drop={c}" for c in caps],
    "SecurityOpt": lambda opts: [f"--security-opt={o}" for o in opts],
    "PidsLimit": lambda n: [f"--pids-limit={n}"],
    "Memory": lambda n: [f"--memory={n}b"],
    "MemorySwap": lambda n: [f"--memory-swap={n}b"],
    "NanoCpus": lambda n: [f"--cpus={n / 1e9}"],
    "ReadonlyRootfs": lambda on: ["--read-only"] if on else [],
    "RestartPolicy": _restart,
    "AutoRemove": lambda _: [],  # --rm stands for the runner's own removal
    "Init": lambda on: ["--init"] if on else [],
    "Ulimits": lambda us: [f"--ulimit={u['Name']}={u['Soft']}:{u['Hard']}" for u in us],
    "LogConfig": _log,
    "Tmpfs": _tmpfs,
    "Mounts": _mounts,
    "NetworkMode": lambda name: [f"--network={name}"],
}


# -- one step of the hardening taken out, in the bench only -----------------------------------


def _without(*keys: str) -> Callable[[Json], None]:
    def drop(body: Json) -> None:
        for key in keys:
            body["HostConfig"].pop(key, None)

    return drop


def _writable_root(body: Json) -> None:
    body["HostConfig"]["ReadonlyRootfs"] = False


def _no_binds(body: Json) -> None:
    body["HostConfig"].pop("Mounts", None)
    body.pop("WorkingDir", None)


def _no_user(body: Json) -> None:
    body.pop("User", None)


def _no_network(body: Json) -> None:
    body["HostConfig"]["NetworkMode"] = "none"


STEPS: dict[str, Callable[[Json], None]] = {
    "init": _without("Init"),
    "read_only_root": _writable_root,
    "tmpfs": _without("Tmpfs"),
    "caps_no_new_privs": _without("CapDrop", "SecurityOpt"),
    "limits": _without("Memory", "MemorySwap", "NanoCpus", "PidsLimit"),
    "ulimits": _without("Ulimits"),
    "log_local": _without("LogConfig"),  # the engine's default driver instead
    "job_network": _without("NetworkMode"),  # the engine's default bridge instead
    "binds": _no_binds,  # the folder's and the usage dir's
    "user": _no_user,
    "any_network": _no_network,  # not a step to take out: what a network costs at all
}


def without_step(body: Json, step: str) -> Json:
    fresh = copy.deepcopy(body)
    STEPS[step](fresh)
    return fresh


# -- the ways ---------------------------------------------------------------------------------


@dataclass
class Bench:
    client: DockerClient
    settings: DockerSettings
    folder: Path
    out_dir: Path
    usage_dir: Path
    image: str

    def ctx(self) -> RunContext:
        job_id = f"bench{uuid.uuid4().hex[:12]}"
        job = Job(
            id=job_id, kind="local", folder=str(self.folder), image=self.image, command=["true"]
        )
        return RunContext(
            job=job,
            attempt=1,
            host=BENCH_HOST,
            fence="0",
            output_dir=self.out_dir,
            output_file=f"{job_id}.log",
            usage_dir=self.usage_dir,
            usage_name=f"{job_id}.json",
            folder=str(self.folder),
        )


def runner_way(bench: Bench) -> Way:
    runner = DockerRunner(bench.settings, bench.client)

    async def run() -> float:
        began = time.perf_counter()
        result = await runner.run(bench.ctx())
        until_result = (time.perf_counter() - began) * 1000
        await runner.settle()  # its removal, before the next way is timed
        if result.exit_code != 0:
            raise RuntimeError(f"runner: {result}")
        return until_result

    return run


def cli_way(body: Json) -> Way:
    docker = shutil.which("docker") or "docker"

    async def run() -> None:
        argv = cli_args(renamed(body, uuid.uuid4().hex[:12]))
        proc = await asyncio.create_subprocess_exec(docker, "run", *argv)
        if await proc.wait() != 0:
            raise RuntimeError(f"docker run failed: {argv}")

    return run


def api_way(client: DockerClient, body: Json) -> Way:
    async def run() -> None:
        name = f"dispatch-bench-{uuid.uuid4().hex[:12]}"
        cid = await client.create_container(name, renamed(body, name))
        waiter = await client.wait(cid, "next-exit")
        await client.start(cid)
        code = await waiter.result()
        await client.remove(cid)
        if code != 0:
            raise RuntimeError(f"api: exit {code}")

    return run


async def _timed(way: Way) -> tuple[float | None, float]:
    """(the way's own figure, if it times one; the whole call) in ms."""
    began = time.perf_counter()
    own = await way()
    return own, (time.perf_counter() - began) * 1000


async def rounds(ways: dict[str, Way], runs: int) -> dict[str, list[float]]:
    """One untimed round, then `runs` rounds of every way in turn, each round starting one way
    later, so that each way follows every other as often (the engine may still be tidying up
    after the one before): times in ms."""
    for way in ways.values():
        await way()  # warm-up: caches, first connection
    names = list(ways)
    times: dict[str, list[float]] = {name: [] for name in ways}
    for n in range(runs):
        for name in names[n % len(names) :] + names[: n % len(names)]:
            own, whole = await _timed(ways[name])
            if own is None:
                times[name].append(whole)
            else:  # the runner's result came before its container's removal ended
                times[name].append(own)
                times.setdefault(f"{name}_removed", []).append(whole)
    return times


# -- set-up -----------------------------------------------------------------------------------


@contextmanager
def job_folders() -> Iterator[tuple[Path, Path, Path]]:
    """The job's folder (nobody's when the bench is root: a root folder is refused), the output
    dir and the usage dir, removed at the end."""
    with tempfile.TemporaryDirectory(prefix="dispatch-bench-") as tmp:
        root = Path(tmp)
        folder, out, usage = root / "folder", root / "out", root / "usage"
        for path in (folder, out, usage):
            path.mkdir()
        if os.geteuid() == 0:
            os.chown(folder, 65534, 65534)
        yield folder, out, usage


@asynccontextmanager
async def job_network(client: DockerClient, name: str) -> AsyncIterator[str]:
    """An internal bridge network, as the daemon makes its job network; removed at the end."""
    await client.network_create(name, {"dispatch.bench": "container"})
    try:
        yield name
    finally:
        await client.network_remove(name)


async def measure(runs: int, image: str, steps: bool) -> dict[str, float]:
    async with DockerClient() as client:
        await client.connect()
        network = f"dispatch-bench-{os.getpid()}"
        with job_folders() as (folder, out, usage):
            async with job_network(client, network):
                roots = (str(folder.parent),)
                settings = DockerSettings(allowed_roots=roots, network=network)
                bench = Bench(client, settings, folder, out, usage, image)
                body = await hardened_body(settings, bench.ctx())
                if steps:
                    return step_summary(await rounds(step_ways(client, body), runs))
                ways = {
                    "runner": runner_way(bench),
                    "cli": cli_way(body),
                    "api": api_way(client, body),
                }
                return summary(await rounds(ways, runs))


def step_ways(client: DockerClient, body: Json) -> dict[str, Way]:
    ways = {"full": api_way(client, body)}
    ways.update({name: api_way(client, without_step(body, name)) for name in STEPS})
    return ways


def summary(times: dict[str, list[float]]) -> dict[str, float]:
    medians = {f"{name}_ms": round(statistics.median(t), 1) for name, t in times.items()}
    return {
        **medians,
        "runner_vs_cli": round(medians["runner_ms"] / medians["cli_ms"], 3),
        "runner_vs_api": round(medians["runner_ms"] / medians["api_ms"], 3),
        "runner_removed_vs_api": round(medians["runner_removed_ms"] / medians["api_ms"], 3),
        "runs": float(len(times["runner"])),
    }


def step_summary(times: dict[str, list[float]]) -> dict[str, float]:
    """The whole body's median, and per step the median without it and the step's delta."""
    full = statistics.median(times["full"])
    figures = {"full_ms": round(full, 1)}
    for name in STEPS:
        without = statistics.median(times[name])
        figures[f"without_{name}_ms"] = round(without, 1)
        figures[f"{name}_delta_ms"] = round(full - without, 1)
    figures["runs"] = float(len(times["full"]))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--image", default="dispatch-test:latest")
    parser.add_argument("--steps", action="store_true", help="what each hardening step costs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    log.stream = open(os.devnull, "w")  # noqa: SIM115 - the runner's events are not the figures
    print_figures(asyncio.run(measure(args.runs, args.image, args.steps)), args.json)


if __name__ == "__main__":
    main()
