"""What a run says it spent: `{"costUsd": 0.42, "tokens": {"input": 1200, "output": 300}}`,
written by the job to the file named by `$DISPATCH_USAGE`.

Each run gets a directory of its own under the state dir (`<state>/usage/<job>.<attempt>.<n>`),
writable by whatever user the job runs as (mode 0777; the `usage/` dir above it is 0700, so
no other user of the host reaches it); the runner names the file in it to the job (the docker
runner binds the directory into the container). After the run the file is read once, without
following a link and at most 64 KiB, then the directory is removed. No file: no report. A file
that does not parse, or holds a negative or non-finite number, is a malformed report: logged,
and the run is charged its reserved amount, as with no report.
"""

from __future__ import annotations

import math
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

import msgspec

from dispatch.budget.plan import micro
from dispatch.log import event

MAX_BYTES = 64 * 1024


class _Tokens(msgspec.Struct, frozen=True):
    input: int = 0
    output: int = 0


class _Report(msgspec.Struct, frozen=True, rename="camel"):
    cost_usd: float | None = None
    tokens: _Tokens | None = None


_decoder = msgspec.json.Decoder(_Report)


@dataclass(frozen=True, slots=True)
class Usage:
    usd_micro: int | None = None
    tokens: int | None = None


def usage_root(state_dir: Path) -> Path:
    return state_dir / "usage"


def prepare(root: Path, name: str) -> Path | None:
    """A fresh, empty directory for one run's report; None (logged) when it cannot be made:
    the job then runs without a report path and is charged what it reserved."""
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        run_dir = root / name
        shutil.rmtree(run_dir, ignore_errors=True)  # a leftover of a run that died with us
        run_dir.mkdir(mode=0o700)
        os.chmod(run_dir, 0o777)  # the job may run as any user; the 0700 parent fences it
    except OSError as exc:
        event("usage_dir_failed", run=name, error=str(exc))
        return None
    return run_dir


def read_and_remove(run_dir: Path | None, file_name: str, job_id: str) -> Usage:
    """The run's report, then the directory is gone; an empty Usage when there is none."""
    if run_dir is None:
        return Usage()
    try:
        return _read(run_dir / file_name, job_id)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _read(path: Path, job_id: str) -> Usage:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return Usage()
    except OSError as exc:  # a link, a FIFO's peer, a permission: not a report we trust
        return _malformed(job_id, f"cannot open: {exc.strerror or exc}")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return _malformed(job_id, "not a regular file")
        raw = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_BYTES:
        return _malformed(job_id, f"larger than {MAX_BYTES} bytes")
    return parse(raw, job_id)


def parse(raw: bytes, job_id: str) -> Usage:
    try:
        report = _decoder.decode(raw)
    except msgspec.DecodeError as exc:
        return _malformed(job_id, str(exc))
    usd, tokens = report.cost_usd, report.tokens
    if usd is not None and not (math.isfinite(usd) and 0 <= usd <= 1e9):
        return _malformed(job_id, "costUsd must be a finite number, 0 or more")
    if tokens is not None and (min(tokens.input, tokens.output) < 0 or tokens.input > 2**50):
        return _malformed(job_id, "tokens must be counts, 0 or more")
    return Usage(
        usd_micro=None if usd is None else micro(usd),
        tokens=None if tokens is None else tokens.input + tokens.output,
    )


def _malformed(job_id: str, why: str) -> Usage:
    event("usage_report_malformed", job=job_id, error=" ".join(why.split())[:300])
    return Usage()
