"""The orchestrator side of the peer protocol (bench/peers/protocol.py): one peer, one run.

Measures what `bench.queue` measures for dispatch, the same way: jobs/s from the server
instant of the resume to the last finish, Redis commands from INFO commandstats deltas (the
orchestrator's own TIME taken off), the worker process's CPU from /proc, lateness from the
handler's own clock against due instants taken from Redis TIME.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from bench.queue import LATE_JOBS, LEAD_MS, SPREAD_MS
from bench.support.cpu import machine_cpu_s
from bench.support.redis import Stats, server_ms, stats
from bench.support.stats import percentile

Row = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
VENV_PY = ROOT / "bench/peers/.venv/bin/python"
STEP_TIMEOUT_S = 600.0  # arq at its default poll drains 20,000 jobs in minutes, not hours


@dataclass(frozen=True, slots=True)
class Peer:
    name: str
    argv: tuple[str, ...]
    probe: tuple[str, ...]  # prints the peer's version; fails when its install is missing

    def version(self) -> str | None:
        """The installed version, or None when `make bench-peers` has not installed it."""
        if shutil.which(self.probe[0]) is None:
            return None
        done = subprocess.run(self.probe, cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else None


def python_peer(name: str) -> Peer:
    py = str(VENV_PY)
    probe = f"import importlib.metadata as m, {name}; print(m.version('{name}'))"
    return Peer(name, (py, "-m", f"bench.peers.{name}_driver"), (py, "-c", probe))


NODE_VERSIONS = """
const v = (p) => require(`./bench/peers/bullmq/node_modules/${p}/package.json`).version;
`${v('bullmq')} (ioredis ${v('ioredis')}, node ${process.versions.node})`
"""

PEERS = {
    "bullmq": Peer(
        "bullmq", ("node", "bench/peers/bullmq/driver.mjs"), ("node", "-p", NODE_VERSIONS)
    ),
    "arq": python_peer("arq"),
    "saq": python_peer("saq"),
}


class Driver:
    """A peer's driver process: JSON lines in from its stdout, one word out to its stdin."""

    def __init__(self, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.proc, self.log = proc, log

    @classmethod
    async def start(cls, peer: Peer, cfg: Row, log: Path) -> Driver:
        with log.open("w") as err:
            proc = await asyncio.create_subprocess_exec(
                *peer.argv,
                json.dumps(cfg),
                cwd=ROOT,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
            )
        return cls(proc, log)

    async def step(self, phase: str, word: str | None = None) -> Row:
        """Say `word` (if any), then read the driver's next line, which must be `phase`."""
        assert self.proc.stdin and self.proc.stdout
        if word is not None:
            self.proc.stdin.write(f"{word}\n".encode())
            await self.proc.stdin.drain()
        line = await asyncio.wait_for(self.proc.stdout.readline(), STEP_TIMEOUT_S)
        row: Row = json.loads(line) if line.strip() else {}
        if row.get("phase") != phase:
            tail = self.log.read_text()[-2000:]
            raise RuntimeError(f"driver said {line!r}, wanted {phase!r}; its stderr:\n{tail}")
        return row

    def cpu_s(self) -> float:
        """User + system CPU seconds of the driver (the peer's worker) so far."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")

    async def close(self) -> None:
        if self.proc.returncode is None:
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


async def measure_peer(peer: Peer, url: str, cfg: Row, tmp: Path) -> Row:
    """One run of `peer` on a fresh queue name: the row `bench.queue` gives for dispatch."""
    queue = f"bench{uuid.uuid4().hex[:10]}"
    cfg = {**cfg, "url": url, "queue": queue}
    cfg.update(late_jobs=LATE_JOBS, spread_ms=SPREAD_MS, lead_ms=LEAD_MS)
    redis = Redis.from_url(url)
    driver = await Driver.start(peer, cfg, tmp / f"{peer.name}-{queue}.log")
    try:
        return await drive(driver, redis, cfg["jobs"])
    finally:
        if driver.proc.returncode is None:
            driver.proc.kill()
            await driver.proc.wait()
        await redis.aclose()


async def drive(driver: Driver, redis: Redis, n: int) -> Row:
    await driver.step("ready")
    before = await stats(redis)
    await driver.step("enqueued", "enqueue")
    enqueued = await stats(redis) - before
    await driver.step("started", "start")
    start, cpu_before, machine_before = await stats(redis), driver.cpu_s(), machine_cpu_s()
    resumed_ms = await server_ms(redis)
    done = await driver.step("processed", "go")
    processed = await stats(redis) - start - Stats({"time": 1}, 0.0)  # our TIME
    cpu = driver.cpu_s() - cpu_before
    busy, steal = (a - b for a, b in zip(machine_cpu_s(), machine_before, strict=True))
    if done["done"] != n:
        raise RuntimeError(f"the driver finished {done['done']} of {n} jobs")
    elapsed_s = (done["last_finish_ms"] - resumed_ms) / 1000
    late = await driver.step("lateness", "late")
    await driver.close()
    out: Row = {
        "processed_per_s": round(n / elapsed_s),
        "enqueue_cmds_per_job": round(enqueued.total / n, 3),
        "process_cmds_per_job": round(processed.total / n, 3),
        "redis_cmds_per_job": round((enqueued.total + processed.total) / n, 3),
        "script_calls_per_job": round(processed.scripts / n, 3),
        "worker_cpu_us_per_job": round(cpu / n * 1e6, 1),
        "redis_cpu_us_per_job": round(processed.cpu_s / n * 1e6, 1),
        "other_cpu_pct": round((busy - cpu - processed.cpu_s) / elapsed_s * 100, 1),
        "steal_pct": round(steal / elapsed_s * 100, 1),
        "process_by_command": by_command(processed, n),
        "late_enqueue_ms": late["enqueue_ms"],
    }
    for phase in ("spread", "burst"):
        out.update(lateness(phase, late[phase]))
    return out


def by_command(used: Stats, n: int) -> dict[str, float]:
    ordered = sorted(used.calls.items(), key=lambda kv: -kv[1])
    return {name: round(calls / n, 3) for name, calls in ordered}


def lateness(phase: str, late: list[float]) -> Row:
    """The same figures, by the same percentile rule, as bench.queue's summary."""
    return {
        f"lateness_{phase}_p50_ms": round(percentile(late, 0.50), 1),
        f"lateness_{phase}_p99_ms": round(percentile(late, 0.99), 1),
        f"lateness_{phase}_max_ms": round(max(late, default=float("nan")), 1),
        f"lateness_{phase}_jobs": len(late),
    }
