"""What the dirty-tree gate's check costs on a large repository, against its time bound.

    python -m bench.git_status [--files 50000] [--rounds 15] [--json]

Builds a repository of `--files` committed files (100 to a folder) in a scratch folder, then
times, round by round, on a warm cache:

    gate      DirtyTreeGate.check: layout and object checks, the private git dir (HEAD, config,
              index copy), `git status` and `git diff-index --cached`
    prepare   the part before git runs (the worker-thread half of the above)
    plain     `git status --porcelain` in the folder, the repository's own config in force
              (what the gate ran before it got a private git dir)

each on the clean tree and with one file modified, first with every object loose (as right
after the commit) and again after `git gc` packs them. Prints medians and maxima in ms, and
the gate's time bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from dispatch.gates.base import Admit, Pickup, Refuse
from dispatch.gates.dirty.gate import DirtyTreeGate, _prepare
from dispatch.model import Job, encode_job
from dispatch.queue.transitions import Claim

# no automatic gc: "loose" stays loose until the bench packs the objects itself
_IDENT = ["-c", "user.name=b", "-c", "user.email=b@example.invalid", "-c", "gc.auto=0"]
Timed = Callable[[], Awaitable[object]]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *_IDENT, "-C", str(repo), *args], check=True, capture_output=True)


def build(repo: Path, files: int) -> None:
    for n in range(files):
        folder = repo / f"d{n // 100:04d}"
        if n % 100 == 0:
            folder.mkdir(parents=True)
        (folder / f"f{n % 100:02d}.txt").write_text(f"file {n}\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "many files")


def _pickup(repo: Path) -> Pickup:
    job = Job(id="bench", kind="local", folder=str(repo))
    return Pickup(Claim(job.queue, job.id, "h:1", 1, 0, 0, encode_job(job)), job)


def ways(repo: Path, gate: DirtyTreeGate, expect: bool) -> dict[str, Timed]:
    async def check() -> object:
        decision = await gate.check(_pickup(repo))
        dirty = isinstance(decision, Refuse) and "uncommitted" in decision.sentence
        if dirty != expect or not (dirty or decision == Admit()):
            raise RuntimeError(f"unexpected verdict: {decision}")
        return decision

    async def prepare() -> object:
        with tempfile.TemporaryDirectory() as scratch:
            return await asyncio.to_thread(_prepare, str(repo), (str(repo.parent),), scratch)

    async def plain() -> object:
        argv = ["git", "-C", str(repo), "status", "--porcelain"]
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
        return await proc.communicate()

    return {"gate": check, "prepare": prepare, "plain": plain}


async def measure(timed: dict[str, Timed], rounds: int) -> dict[str, dict[str, float]]:
    samples: dict[str, list[float]] = {name: [] for name in timed}
    for run in timed.values():  # one untimed warm-up each
        await run()
    for _ in range(rounds):
        for name, run in timed.items():
            start = time.perf_counter()
            await run()
            samples[name].append((time.perf_counter() - start) * 1000)
    return {
        name: {"median_ms": statistics.median(s), "max_ms": max(s)} for name, s in samples.items()
    }


async def bench(files: int, rounds: int) -> dict[str, object]:
    results: dict[str, object] = {"files": files, "rounds": rounds, "bound_s": 10.0}
    with tempfile.TemporaryDirectory(prefix="bench-git-") as scratch:
        repo = Path(scratch) / "repo"
        start = time.perf_counter()
        build(repo, files)
        results["build_s"] = round(time.perf_counter() - start, 1)
        gate = DirtyTreeGate(timeout_s=60.0, roots=(scratch,))
        for objects in ("loose", "packed"):
            if objects == "packed":
                _git(repo, "gc", "-q")
            results[f"{objects}/clean"] = await measure(ways(repo, gate, False), rounds)
            touched = repo / "d0000" / "f00.txt"
            touched.write_text("changed\n")
            results[f"{objects}/one-modified"] = await measure(ways(repo, gate, True), rounds)
            _git(repo, "checkout", "-q", "--", str(touched))
        results["index_bytes"] = (repo / ".git" / "index").stat().st_size
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = asyncio.run(bench(args.files, args.rounds))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.files} files, {args.rounds} rounds, built in {results['build_s']} s")
    for key, value in results.items():
        if isinstance(value, dict):
            cells = [f"{n} {v['median_ms']:.0f} (max {v['max_ms']:.0f})" for n, v in value.items()]
            print(f"{key:20} " + "  ".join(cells))


if __name__ == "__main__":
    main()
