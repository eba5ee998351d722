"""What the soak's marks say about each job's runs: how many, which ended, which overlapped.

Each run of a job's command appends two lines to the job's marks file, `s <ns> <pid> <ppid>`
as it starts and `e <ns> <pid> <ppid>` as it ends (`date +%s%N`, the wall clock the bench reads
with `time.time_ns()` and Redis with TIME); `pid` is the shell's own, so it tells the runs
apart, and `ppid` the daemon process that started it. A run with a start and no end was
killed on the way.

Counting, exactly:
  ended twice      a job with two or more end lines; each is then one of:
  reran unreported   the first run's daemon was killed or frozen (or Redis paused and then
                   the daemon was killed) between that run's end and the next run's start,
                   so its outcome never reached Redis: the claim lapsed and, at least once,
                   the job ran again. No supervisor can close this window (the command has
                   ended, the one process that knows it is gone or stopped); a frozen
                   daemon's run going on elsewhere is what the faults issue's own row asks.
  completed twice  every other job that ended twice: no fault explains it, so dispatch ran a
                   job whose outcome it had, or could have had: a defect.
  overlap          a pair of runs of one job, taken in start order (a, b), with b's start
                   before a's end. A run with no end was killed; its end is the earliest
                   later evidence that it was gone: the instant the bench saw its daemon
                   process reaped (the runner gives every child a parent-death SIGKILL), or
                   the end of a run record its daemon's host wrote for that job, for a run
                   that did not end on its own (a kill or a non-zero exit), ending at or after
                   its start (the daemon writes it once the process is gone). A run with no
                   end and no such evidence counts as an overlap with every later run.
  after done       a run that started after the job's final result was written (the job's
                   score in `done`, server ms): a daemon ran a job it no longer held.
  orphan           a run whose parent was not a daemon process the bench started: its daemon
                   was gone before the shell started, so nothing supervised it.
  cause            why a job ended twice, the first that applies: `after_done` (a run
                   of it that started after it was done reached its end); what happened
                   between its first end and the next run's start to the daemon process that
                   ran the first (`kill`, `freeze`) or to Redis (`pause`), every kind that
                   did, as `kill+pause`; `orphan` (the first run was); else `none`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

SCRIPT = (
    'echo "s $(date +%s%N) $$ $PPID" >> "$1"; '
    "sleep {sleep}; "
    'echo "e $(date +%s%N) $$ $PPID" >> "$1"'
)
NEVER = 2**63
# A kill or freeze of the daemon that ran the first run, between its end and the rerun: the
# outcome died with the daemon or waited in a stopped one. A Redis pause alone explains nothing
# (a live daemon delivers the outcome once Redis is back).
DAEMON_FAULTS = frozenset({"kill", "freeze"})


def command(marks: Path, sleep_s: float) -> list[str]:
    """The job's command: its marks file is the shell's first argument, so nothing is quoted."""
    return ["sh", "-c", SCRIPT.format(sleep=sleep_s), "soak", str(marks)]


@dataclass
class Run:
    pid: int  # the shell's
    daemon_pid: int
    start_ns: int | None = None
    end_ns: int | None = None


class Fault(msgspec.Struct, frozen=True):
    kind: str  # kill | freeze | pause
    target: str  # a daemon's host name, or "redis"
    pid: int  # the process signalled
    start_ns: int
    end_ns: int  # a kill: when the process was reaped; a freeze or pause: when it went on


@dataclass(frozen=True)
class Evidence:
    """What the bench saw besides the marks."""

    faults: list[Fault]
    gone_ns: dict[int, int]  # daemon pid -> when the bench saw it reaped
    host_of: dict[int, str]  # every daemon process the bench started -> its host name
    stopped_ns: dict[tuple[str, str], list[int]]  # (job, host) -> ends of its stopped runs

    def end_bound(self, job_id: str, run: Run) -> int | None:
        """The run's end, or the earliest later evidence that it was gone; None if none."""
        if run.end_ns is not None:
            return run.end_ns
        start = run.start_ns or 0
        host = self.host_of.get(run.daemon_pid, "")
        found = [ns for ns in self.stopped_ns.get((job_id, host), []) if ns >= start]
        if run.daemon_pid in self.gone_ns:
            found.append(self.gone_ns[run.daemon_pid])
        return min(found, default=None)


def read_runs(path: Path) -> list[Run]:
    """The runs in a marks file, in start order (a run whose start line is missing last)."""
    runs: dict[int, Run] = {}
    if not path.exists():
        return []
    for line in path.read_text().splitlines():
        kind, ns, pid, ppid = line.split()
        run = runs.setdefault(int(pid), Run(int(pid), int(ppid)))
        if kind == "s":
            run.start_ns = int(ns)
        else:
            run.end_ns = int(ns)
    return sorted(runs.values(), key=lambda r: r.start_ns or NEVER)


def overlaps(job_id: str, runs: list[Run], evidence: Evidence) -> int:
    count = 0
    for i, a in enumerate(runs):
        bound = evidence.end_bound(job_id, a)
        for b in runs[i + 1 :]:
            if b.start_ns is None or bound is None or b.start_ns < bound:
                count += 1
    return count


def faults_between(first: Run, runs: list[Run], faults: list[Fault]) -> str | None:
    """The kinds of fault, on the first run's daemon or on Redis, between its end and the
    next start, joined by `+` ("kill+pause"); None when there was none."""
    lo = first.end_ns or 0
    hi = min((r.start_ns for r in runs if r.start_ns and r.start_ns > lo), default=NEVER)
    kinds = {
        f.kind
        for f in faults
        if (f.target == "redis" or f.pid == first.daemon_pid)
        and f.start_ns <= hi
        and f.end_ns >= lo
    }
    return "+".join(sorted(kinds)) or None


@dataclass
class Tally:
    evidence: Evidence
    runs: int = 0
    killed_runs: int = 0  # started, never ended
    completed_twice: int = 0  # ended twice with no fault to explain it
    reran_unreported: int = 0  # ended twice because the first outcome was lost with a fault
    overlapping_runs: int = 0
    runs_after_done: int = 0
    orphan_runs: int = 0
    causes: Counter[str] = field(default_factory=Counter)
    unexplained: list[str] = field(default_factory=list)  # completed twice: the job ids
    ended: set[str] = field(default_factory=set)  # jobs whose command reached its end

    def add(self, job_id: str, runs: list[Run], done_ms: int | None) -> None:
        ends = sum(r.end_ns is not None for r in runs)
        done_ns = (done_ms + 1) * 1_000_000 if done_ms is not None else NEVER
        late = [r for r in runs if r.start_ns is not None and r.start_ns > done_ns]
        orphans = sum(r.daemon_pid not in self.evidence.host_of for r in runs)
        self.runs += len(runs)
        self.killed_runs += len(runs) - ends
        self.overlapping_runs += overlaps(job_id, runs, self.evidence)
        self.runs_after_done += len(late)
        self.orphan_runs += orphans
        if ends:
            self.ended.add(job_id)
        if ends > 1:
            cause = self._cause(runs, any(r.end_ns is not None for r in late))
            self.causes[cause] += 1
            if DAEMON_FAULTS & set(cause.split("+")):
                self.reran_unreported += 1
            else:
                self.completed_twice += 1
                self.unexplained.append(job_id)

    def _cause(self, runs: list[Run], late_end: bool) -> str:
        first = next(r for r in runs if r.end_ns is not None)
        if late_end:
            return "after_done"
        fault = faults_between(first, runs, self.evidence.faults)
        if fault is not None:
            return fault
        return "orphan" if first.daemon_pid not in self.evidence.host_of else "none"


def tally(marks: Path, done_ms: dict[str, int | None], evidence: Evidence) -> Tally:
    out = Tally(evidence)
    for job_id, done in done_ms.items():
        out.add(job_id, read_runs(marks / job_id), done)
    return out
