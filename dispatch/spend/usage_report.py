"""What a run says it spent: `{"costUsd": 0.42, "tokens": {"input": 1200, "output": 300}}`,
written by the job to the file named by `$DISPATCH_USAGE`.

Each running job has a directory of its own under the state dir (`<state>/usage/slot-<n>`,
`UsageDirs`), writable by whatever user the job runs as (mode 0777; the `usage/` dir above it
is 0700, so no other user of the host reaches it); the runner names a file in it, fresh for the
run, to the job (the docker runner binds the directory into the container). After the run the
file is read once, without following a link and at most 64 KiB, then removed; the directory
goes to the next run only if nothing else is left in it. No file: no report.

A directory that no run has changed for a settle time when it is lent, and whose stat is the
same after the run, is not listed (the stat is of a descriptor kept open on it: no path walk).
Making, removing or renaming anything in it, or changing its mode or owner, moves its ctime,
which no process can set back, and a change made a settle time after the last one lands on a
later time stamp: 2 s where stamps are whole seconds, 0.1 s where they are finer than 10 ms
(ext4, xfs, btrfs, tmpfs: ten ticks of the kernel's coarse clock at the least). On FAT the
mode never matches, so every directory is listed.

A file that does not parse, or holds a number that is negative, not finite or past its bound
(costUsd 10^9 dollars, each token count 2^50: the micro-dollars and the tokens' sum stay below
2^53, the largest integer the settle script takes), is a malformed report: logged, and the run
is charged its reserved amount, as with no report.
"""

from __future__ import annotations

import math
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec

from dispatch.host.files import NotRegular, TooLarge, read_bounded
from dispatch.log import event
from dispatch.spend.plan import micro

MAX_BYTES = 64 * 1024
MAX_USD = 1e9  # 10^15 micro-dollars
MAX_TOKENS = 2**50  # per count: input + output is at most 2^51
SETTLED_S = 2.0  # a report dir unchanged this long when lent is judged by one fstat after
FINE_SETTLED_S = 0.1  # the same where time stamps are finer than 10 ms
# a descriptor that only names the directory: its fstat skips the path walk that makes up two
# thirds of an lstat here; only the daemon's user can move the path (usage/ is 0700)
_DIR_FD_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_PATH", 0)


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


NO_REPORT = Usage()


def usage_root(state_dir: Path) -> Path:
    return state_dir / "usage"


class UsageDirs:
    """One report directory per running job, reused by the next run once it is clean.

    A directory costs a mkdir, a chmod and an rmdir, journaled on the state dir's disk (about
    50 us a run here, a fifth of a no-op job's daemon time): a clean one is reused instead.
    Each run names its report file afresh (`<run>.json`), so a writer a run left behind
    cannot write the next run's report by accident. After a run the report is read and
    unlinked; a directory left with anything else in it, or changed (its mode, its owner), is
    removed and never handed out again."""

    def __init__(
        self, root: Path, settled_s: float = SETTLED_S, fine_settled_s: float = FINE_SETTLED_S
    ) -> None:
        self.root = root
        self.settled_ns = int(settled_s * 1e9)
        self.fine_settled_ns = int(min(fine_settled_s, settled_s) * 1e9)
        self._clean: list[Path] = []
        self._made = 0
        self._stamps: dict[Path, Mark] = {}  # a clean directory's mark when last seen clean
        self._lent_quiet: dict[Path, Mark] = {}  # lent while quiet: the mark it must keep
        self._fds: dict[Path, int] = {}  # a descriptor on the inode its stamp was taken of

    def take(self) -> Path | None:
        """A clean directory for one run; None (logged) when none can be made: the job then
        runs without a report path and is charged what it reserved."""
        if self._clean:
            run_dir = self._clean.pop()
            stamp = self._stamps.get(run_dir)
            # the wall clock, as file times are: a change from now on gets a later ctime
            if stamp is not None and time.time_ns() - stamp[-1] >= self.settle_ns(stamp[-1]):
                self._lent_quiet[run_dir] = stamp
            return run_dir
        self._made += 1
        name = f"slot-{self._made}"
        run_dir = self.root / name
        try:
            _fresh_dir(self.root, run_dir)
            os.chmod(run_dir, 0o777)  # the job may run as any user; the 0700 parent fences it
        except OSError as exc:
            event("usage_dir_failed", run=name, error=str(exc))
            return None
        return run_dir

    def settle_ns(self, ctime_ns: int) -> int:
        """How long a directory stamped `ctime_ns` must be left alone: a stamp that is no
        multiple of 10 ms comes from a filesystem with finer ones."""
        return self.fine_settled_ns if ctime_ns % 10_000_000 else self.settled_ns

    def read_and_return(self, run_dir: Path | None, file_name: str, job_id: str) -> Usage:
        """The run's report; then its directory is clean for the next run, or gone."""
        if run_dir is None:
            return NO_REPORT
        stamp = self._lent_quiet.pop(run_dir, None)
        if stamp is not None and self._mark_now(run_dir) == stamp:
            self._clean.append(run_dir)  # nothing was made in it: nothing to read or clear
            return NO_REPORT
        try:
            left = os.listdir(run_dir)
        except OSError:
            left = None
        try:
            return _read(run_dir / file_name, job_id) if left else NO_REPORT
        finally:
            self._give_back(run_dir, file_name, left)

    def _give_back(self, run_dir: Path, file_name: str, left: list[str] | None) -> None:
        clean = left == [] or left == [file_name]
        try:
            if left:
                os.unlink(run_dir / file_name)
            st = os.lstat(run_dir) if clean else None
            if st is not None and (st.st_mode != _CLEAN_MODE or st.st_uid != os.geteuid()):
                st = None
            if st is not None:
                self._keep_fd(run_dir, st)
        except OSError:
            st = None
        if st is not None:
            self._stamps[run_dir] = _mark(st)
            self._clean.append(run_dir)
        else:  # whatever the run left there is the job's: none of it reaches another run
            self._stamps.pop(run_dir, None)
            self._close(run_dir)
            shutil.rmtree(run_dir, ignore_errors=True)

    def close(self) -> None:
        """Close the kept descriptors; a directory taken after this is judged by listing."""
        for run_dir in list(self._fds):
            self._close(run_dir)
        self._stamps.clear()
        self._lent_quiet.clear()

    def _keep_fd(self, run_dir: Path, st: os.stat_result) -> None:
        """A descriptor on the inode the path names now, which `st` is the lstat of: the one
        kept already when the last stamp (inode, device first) was of that inode too."""
        stamp = self._stamps.get(run_dir)
        if run_dir in self._fds and stamp is not None and stamp[:2] == (st.st_ino, st.st_dev):
            return
        self._close(run_dir)
        fd = self._fds[run_dir] = os.open(run_dir, _DIR_FD_FLAGS)
        opened = os.fstat(fd)
        if (opened.st_ino, opened.st_dev) != (st.st_ino, st.st_dev):  # moved in between
            raise FileNotFoundError(run_dir)

    def _close(self, run_dir: Path) -> None:
        fd = self._fds.pop(run_dir, None)
        if fd is not None:
            os.close(fd)

    def _mark_now(self, run_dir: Path) -> Mark | None:
        fd = self._fds.get(run_dir)
        try:
            return _mark(os.fstat(fd)) if fd is not None else None
        except OSError:
            return None


Mark = tuple[int, int, int, int, int, int, int]


def _mark(st: os.stat_result) -> Mark:
    """What any change to a directory's entries, mode or owner moves; its ctime last."""
    return (
        st.st_ino,
        st.st_dev,
        st.st_mode,
        st.st_uid,
        st.st_nlink,
        st.st_mtime_ns,
        st.st_ctime_ns,
    )


_CLEAN_MODE = stat.S_IFDIR | 0o777


def _fresh_dir(root: Path, run_dir: Path) -> None:
    """One mkdir on the usual path; the root and a leftover are dealt with only when met."""
    try:
        run_dir.mkdir(mode=0o700)
        return
    except FileNotFoundError:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        shutil.rmtree(run_dir, ignore_errors=True)  # a leftover of a daemon before this one
    run_dir.mkdir(mode=0o700)


def _read(path: Path, job_id: str) -> Usage:
    try:
        raw = read_bounded(path, MAX_BYTES)  # no link followed: the job wrote this file
    except FileNotFoundError:
        return NO_REPORT
    except NotRegular:
        return _malformed(job_id, "not a regular file")
    except TooLarge:
        return _malformed(job_id, f"larger than {MAX_BYTES} bytes")
    except OSError as exc:  # a link, a FIFO's peer, a permission: not a report we trust
        return _malformed(job_id, f"cannot open: {exc.strerror or exc}")
    return parse(raw, job_id)


def parse(raw: bytes, job_id: str) -> Usage:
    try:
        report = _decoder.decode(raw)
    except msgspec.DecodeError as exc:
        return _malformed(job_id, str(exc))
    usd, tokens = report.cost_usd, report.tokens
    if usd is not None and not (math.isfinite(usd) and 0 <= usd <= MAX_USD):
        return _malformed(job_id, f"costUsd must be a finite number, 0 to {MAX_USD:.0f}")
    if tokens is not None and not all(0 <= n <= MAX_TOKENS for n in (tokens.input, tokens.output)):
        return _malformed(job_id, f"tokens must be counts, 0 to {MAX_TOKENS} each")
    return Usage(
        usd_micro=None if usd is None else micro(usd),
        tokens=None if tokens is None else tokens.input + tokens.output,
    )


def _malformed(job_id: str, why: str) -> Usage:
    event("usage_report_malformed", job=job_id, error=" ".join(why.split())[:300])
    return NO_REPORT
