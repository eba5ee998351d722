"""Start latency on an idle daemon: from `Client.submit` to the job's first instruction.

    python -m bench.latency [--jobs 200] [--runner process|docker|both] [--json] [--keep]
                            [--image dispatch-test:latest]

For each runner the bench starts its own redis-server and one daemon as an operator would,
`python -m dispatch worker` (the benches' settings, bench/support/children.py, with
DISPATCH_RUNNER set; the docker daemon on a job network of the bench's own behind its egress
proxy, `dispatch-bench-<pid>`, removed at the end). A few untimed jobs first (the daemon's
boot, the engine's caches), then `--jobs` jobs one after another: submit one
(`dispatch.client.Client.submit`, timed with `time.time_ns()` from the call), poll until it
has ended, read its output, next. Timed from the call, the figure includes the submit's own
round trip (`stage_submit_ms`): timed from its return, it read below zero on a loaded machine,
where the daemon could claim and start the job before the bench was scheduled to read the
clock. The daemon is idle at every submit: blocked on its queue's marker (BZPOPMIN), nothing
else in flight.

The first instruction stamps itself: the job's command is busybox's `adjtimex`, a static
binary that makes one adjtimex(2) call and prints the kernel's CLOCK_REALTIME from it (ns, as
the STA_NANO status bit says; us otherwise). The process runner runs the host's
`busybox adjtimex`, the docker runner the image's `/bin/adjtimex` (busybox's `date` has no
%N); the container's process shares the host kernel's clock, so both ends read one clock.
What is measured therefore includes the exec of the job's program but nothing of its own
start-up beyond that (a Python job's import time is the job's, not the daemon's).

Stages, from the run record's `admitted_at` (whole milliseconds, so each stage is off by up to
1 ms and `pickup` can read a little below 0): `submit` the call's own round trip, `pickup`
submit called -> admitted (the marker's wake-up, the claim, the gates), `run` admitted -> first
instruction (the runner's work).

The bench polls for each job's end every 50 ms only: polling every few ms loaded the 2-core
machine enough to add ~25 ms to the docker runner's start, which the bare column never paid.

Docker runner only: interleaved with the daemon's jobs, one to one, the bench makes the same
container through the bare Engine API: the create body the daemon's runner would send (taken
from `DockerRunner.run` itself, `bench.container.hardened_body`, with proxy variables of the
same shape and a usage dir; labelled with another host, or the daemon's reconciler would
reap them), timed from the instant before the create, then create, wait(next-exit), start,
exit, logs, remove. That is the `bare` column.

Targets: process runner p99 <= 15 ms; docker runner p99 <= bare p99 + 30 ms. Prints p50, p95,
p99 and max in ms, the stages' p50 and p99, and for docker the differences and ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.container import hardened_body, renamed
from bench.support.children import Children, Daemon, children, daemon_env, start_redis
from bench.support.stats import percentile
from dispatch.client import Client, JobView
from dispatch.config.settings import from_env
from dispatch.egress import firewall
from dispatch.egress.errors import EgressDown
from dispatch.log import log
from dispatch.model import Job, new_id
from dispatch.queue.connect import redis_client
from dispatch.runners.base import RunContext
from dispatch.runners.docker import DockerClient, DockerError
from dispatch.runners.docker.settings import docker_settings

WARM_UP = 5
JOB_DEADLINE_S = 60.0  # the first job also waits out the boot
POLL_S = 0.05  # sparse: the bench's own polling must not load the start it times (above)
_STA_NANO = 0x2000
_FIELD = re.compile(r"^\s*(status|time\.tv_sec|time\.tv_usec):\s*(\d+)", re.MULTILINE)


def stamp_ns(output: str) -> int:
    """The instant `adjtimex` printed, in epoch ns; a plain integer of ns is taken as is."""
    text = output.strip()
    if text.isdigit():
        return int(text)
    fields = {name: int(value) for name, value in _FIELD.findall(text)}
    try:
        sub = (
            fields["time.tv_usec"]
            if fields["status"] & _STA_NANO
            else fields["time.tv_usec"] * 1000
        )
        return fields["time.tv_sec"] * 1_000_000_000 + sub
    except KeyError:
        raise ValueError(f"no time in the job's output: {text[:200]!r}") from None


def host_stamp() -> list[str]:
    busybox = shutil.which("busybox") or sys.exit("busybox not found: it stamps the process runs")
    return [busybox, "adjtimex"]


def _ms(iso: str | None) -> int | None:
    return None if iso is None else int(datetime.fromisoformat(iso).timestamp() * 1000)


@dataclass
class Sample:
    total_ms: float  # submit called -> first instruction
    pickup_ms: float | None  # submit called -> admitted
    run_ms: float | None  # admitted -> first instruction
    submit_ms: float | None = None  # submit called -> returned


@dataclass
class Daemonised:
    """One daemon on its own Redis: the client that submits to it and where its output goes."""

    client: Client
    output: Path
    command: list[str]
    image: str | None

    async def one(self) -> Sample:
        job = Job(id=new_id(), image=self.image, command=self.command)
        submitted_ns = time.time_ns()
        await self.client.submit(job)
        returned_ns = time.time_ns()
        view = await self._ended(job.id)
        (record,) = await self.client.records_of(view, last=1)
        if record.outcome != "completed":
            raise RuntimeError(f"job {job.id}: {record.outcome} {record.reason}")
        (path,) = self.output.glob(f"{job.id}.*.log")
        started_ns = stamp_ns(path.read_text())
        total = (started_ns - submitted_ns) / 1e6
        admitted = _ms(record.admitted_at)
        pickup = None if admitted is None else admitted - submitted_ns / 1e6
        run = None if pickup is None else total - pickup
        return Sample(total, pickup, run, (returned_ns - submitted_ns) / 1e6)

    async def _ended(self, job_id: str) -> JobView:
        deadline = time.monotonic() + JOB_DEADLINE_S
        while True:
            view = await self.client.get(job_id)
            if view is not None and view.state in ("completed", "failed", "cancelled"):
                return view
            if time.monotonic() > deadline:
                raise RuntimeError(f"job {job_id} did not end in {JOB_DEADLINE_S:.0f} s")
            await asyncio.sleep(POLL_S)


# -- the bare Engine API, the runner's body --------------------------------------------------


async def bare_body(env: dict[str, str], usage: Path, network: str) -> dict[str, Any]:
    """The body the daemon's runner sends, with proxy variables shaped like its guard's."""
    settings = docker_settings(from_env(env))
    url = f"http://job:{uuid.uuid4().hex}@{network}-gateway:3128"
    proxy = [f"{k}={url}" for name in ("HTTPS_PROXY", "HTTP_PROXY") for k in (name, name.lower())]
    proxy += ["NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1"]
    job_id = new_id()
    job = Job(id=job_id, command=["adjtimex"])
    ctx = RunContext(
        job=job,
        attempt=1,
        host="latency-bare",  # not the daemon's: its reconciler would reap these containers
        fence="1",
        output_dir=usage,
        output_file=f"{job_id}.log",
        usage_dir=usage,
        usage_name=f"{job_id}.json",
    )
    return await hardened_body(settings, ctx, proxy)


async def bare_one(client: DockerClient, body: dict[str, Any]) -> Sample:
    name = f"dispatch-bench-{uuid.uuid4().hex[:12]}"
    began_ns = time.time_ns()
    cid = await client.create_container(name, renamed(body, name))
    try:
        waiter = await client.wait(cid, "next-exit")
        await client.start(cid)
        if await waiter.result() != 0:
            raise RuntimeError("bare: adjtimex failed")
        out = b"".join([chunk async for chunk in client.logs(cid, follow=False)])
    finally:
        await client.remove(cid, force=True)
    return Sample((stamp_ns(out.decode()) - began_ns) / 1e6, None, None)


# -- one runner -------------------------------------------------------------------------------


def _env(url: str, work: Path, runner: str, image: str, network: str) -> dict[str, str]:
    env = daemon_env(url, f"lat{uuid.uuid4().hex[:8]}", work / "state", f"latency-{runner}")
    env["DISPATCH_RUNNER"] = runner
    if runner == "docker":
        env.update(DISPATCH_IMAGE=image, DISPATCH_JOB_NETWORK=network, DISPATCH_EGRESS_PORT="0")
    return env


async def _series(
    jobs: int, ways: dict[str, Callable[[], Awaitable[Sample]]]
) -> dict[str, list[Sample]]:
    for _ in range(WARM_UP):
        for way in ways.values():
            await way()
    samples: dict[str, list[Sample]] = {name: [] for name in ways}
    for _ in range(jobs):
        for name, way in ways.items():
            samples[name].append(await way())
    return samples


async def runner_series(kids: Children, work: Path, runner: str, args: Any) -> dict[str, Any]:
    network = f"dispatch-bench-{os.getpid()}"
    url = start_redis(kids, work)
    env = _env(url, work, runner, args.image, network)
    (work / "state").mkdir()
    daemon = Daemon(env["DISPATCH_HOST"], work / "state", env)
    kids.daemons.append(daemon)
    daemon.start()
    redis = redis_client(url, socket_timeout=10)
    command = host_stamp() if runner == "process" else ["adjtimex"]
    image = args.image if runner == "docker" else None
    client = Client(redis, env["DISPATCH_PREFIX"], host="latency-bench")
    target = Daemonised(client, work / "state" / "output", command, image)
    try:
        ways: dict[str, Callable[[], Awaitable[Sample]]] = {"daemon": target.one}
        if runner != "docker":
            return figures(await _series(args.jobs, ways))
        async with DockerClient() as docker:
            (work / "usage").mkdir()
            body = await bare_body(env, work / "usage", network)
            ways["bare"] = lambda: bare_one(docker, body)
            return figures(await _series(args.jobs, ways))
    finally:
        await redis.aclose()
        daemon.send(signal.SIGTERM)
        await daemon.gone()
        if runner == "docker":
            await _remove_network(network)


async def _remove_network(name: str) -> None:
    """The job network and any firewall rule left for it (the daemon removes its own)."""
    with contextlib.suppress(EgressDown):
        await firewall.remove(f"{firewall.TAG} {name} ")
    async with DockerClient() as client:
        try:
            await client.network_remove(name)
        except DockerError as exc:
            print(f"job network {name} not removed: {exc}", file=sys.stderr)


# -- figures ----------------------------------------------------------------------------------


def spread(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 0.50), 2),
        "p95": round(percentile(values, 0.95), 2),
        "p99": round(percentile(values, 0.99), 2),
        "max": round(max(values), 2),
    }


def figures(samples: dict[str, list[Sample]]) -> dict[str, Any]:
    out: dict[str, Any] = {"jobs": len(samples["daemon"])}
    for name, series in samples.items():
        out[name] = spread([s.total_ms for s in series])
    stages = samples["daemon"]
    for stage in ("submit_ms", "pickup_ms", "run_ms"):
        values = [v for s in stages if (v := getattr(s, stage)) is not None]
        if values:
            p = spread(values)
            out[f"stage_{stage}"] = {"p50": p["p50"], "p99": p["p99"]}
    if "bare" in out:
        d, b = out["daemon"], out["bare"]
        out["daemon_minus_bare"] = {q: round(d[q] - b[q], 2) for q in ("p50", "p95", "p99")}
        out["daemon_over_bare"] = {q: round(d[q] / b[q], 3) for q in ("p50", "p95", "p99")}
    return out


def loadavg() -> list[str]:
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


async def measure(args: Any) -> dict[str, Any]:
    runners = ["process", "docker"] if args.runner == "both" else [args.runner]
    results: dict[str, Any] = {"loadavg": loadavg()}
    for runner in runners:
        work = Path(tempfile.mkdtemp(prefix=f"dispatch-lat-{runner}-"))
        try:
            with children() as kids:
                results[runner] = await runner_series(kids, work, runner, args)
        finally:
            if args.keep:
                print(f"kept {work}", file=sys.stderr)
            else:
                shutil.rmtree(work, ignore_errors=True)
    return results


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--runner", choices=["process", "docker", "both"], default="both")
    parser.add_argument("--image", default="dispatch-test:latest")
    parser.add_argument("--keep", action="store_true", help="keep the daemons' state and logs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser.parse_args(argv)


def report(results: dict[str, Any]) -> None:
    print(f"loadavg at start {' '.join(results['loadavg'])}")
    for runner in ("process", "docker"):
        if runner not in results:
            continue
        r = results[runner]
        print(f"\n{runner} runner, {r['jobs']} jobs (ms)")
        for key, value in r.items():
            if isinstance(value, dict):
                print(f"  {key:>18}  " + "  ".join(f"{q} {v}" for q, v in value.items()))


def main() -> None:
    args = parse()
    log.stream = open(os.devnull, "w")  # noqa: SIM115 - the runner's events are not the figures
    results = asyncio.run(measure(args))
    if args.json:
        print(json.dumps(results))
        return
    report(results)


if __name__ == "__main__":
    main()
