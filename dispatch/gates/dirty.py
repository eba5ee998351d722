"""Dirty-tree gate: a local job edits its folder in place, so a folder inside a git work tree
with uncommitted changes (untracked files included) is refused `dirty-tree` unless the job
says `force`. When git cannot answer (not installed, fails, times out) the job is refused as
well: running in place is only safe when we know the tree is clean.

git runs read-only (`GIT_OPTIONAL_LOCKS=0`: never the index lock), with the caller's GIT_*
variables dropped. It runs on the host as the daemon's user, in a folder an earlier job's
container had mounted read-write, so the repository's config is that job's to write: a
filter driver (with a matching `.gitattributes`), `core.fsmonitor`, or an include pulling
either in would run the job's command outside its container. So before git starts, the gate
finds the git dir as git does (the first `.git` up from the folder, following a `.git` file's
`gitdir:` and a `commondir`), reads `config` and `config.worktree` there in a worker thread,
and refuses on any `[filter`, `[include` or `fsmonitor`, or when they cannot be read. git is
then pinned to that git dir and work tree, with fsmonitor and hooks off, and does not look
inside submodules (each has a config of its own; a submodule at another commit still
counts). `safe.directory=*` stays, as the folder may belong to another user and the scan
covers what the ownership check guarded against; system and global config are the
operator's. Sentences name the folder's basename only: records are shared fleet-wide.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import posixpath
import re
import stat
from dataclasses import dataclass

import anyio

from dispatch.gates.base import ADMIT, Decision, Pickup, Refuse
from dispatch.reasons import DIRTY_TREE

_ABSOLUTE_PATH = re.compile(r"/[^\s'\"`:]+")
_MAX_FILE_BYTES = 1 << 20
# git opens a section after any whitespace or `]`, mid-line too, so none of these is anchored
_HAZARDS = (
    (re.compile(rb"\[\s*filter", re.IGNORECASE), "a filter driver"),
    (re.compile(rb"\[\s*include", re.IGNORECASE), "an include"),
    (re.compile(rb"fsmonitor", re.IGNORECASE), "an fsmonitor command"),
)


class _Unsafe(Exception):
    """Why git cannot be run on the repository without trusting what a job wrote."""


@dataclass(frozen=True, slots=True)
class _Repo:
    top: str  # the work tree: the folder holding `.git`
    gitdir: str


def _find_dotgit(folder: str) -> str | None:
    """The first `.git` (a directory, or a file as in worktrees and submodules) in the folder
    or one of its parents; without one there is no work tree to ask about."""
    path = posixpath.normpath(folder)
    while True:
        dotgit = posixpath.join(path, ".git")
        if os.path.lexists(dotgit):
            return dotgit
        parent = posixpath.dirname(path)
        if parent == path:
            return None
        path = parent


def _inspect_repo(folder: str) -> _Repo | None:
    """The repository git would use for the folder, None when there is none; raises _Unsafe
    when its config must not be loaded. Touches the filesystem: run it in a worker thread."""
    dotgit = _find_dotgit(os.path.abspath(folder))
    if dotgit is None:
        return None
    if os.path.isdir(dotgit):
        gitdir = dotgit
    elif os.path.isfile(dotgit):
        gitdir = _pointer(_read(dotgit, "its .git file"), b"gitdir: ", dotgit, "its .git file")
        if not os.path.isdir(gitdir):
            raise _Unsafe("its .git file points to no git directory")
    else:
        raise _Unsafe("its .git is neither a file nor a directory")
    _scan_config(gitdir)
    return _Repo(posixpath.dirname(dotgit), gitdir)


def _scan_config(gitdir: str) -> None:
    commondir = posixpath.join(gitdir, "commondir")
    pointed = _read(commondir, "its commondir file")
    common = gitdir if pointed is None else _pointer(pointed, b"", commondir, "its commondir file")
    for path in (posixpath.join(common, "config"), posixpath.join(gitdir, "config.worktree")):
        text = _read(path, "its git config") or b""
        for pattern, what in _HAZARDS:
            if pattern.search(text):
                raise _Unsafe(f"its git config defines {what}")


def _pointer(data: bytes | None, prefix: bytes, source: str, what: str) -> str:
    """The path a `.git` file or `commondir` names, as git reads it: trailing line ends
    dropped, relative to the folder holding the file."""
    path = (data or b"").removeprefix(prefix).rstrip(b"\r\n")
    if data is None or not data.startswith(prefix) or not path or b"\n" in path or b"\0" in path:
        raise _Unsafe(f"{what} does not name a git directory")
    return posixpath.join(posixpath.dirname(source), os.fsdecode(path))


def _read(path: str, what: str) -> bytes | None:
    """A small regular file's bytes, None when there is none."""
    try:
        return _read_regular(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _Unsafe(f"{what} cannot be read ({exc.strerror or exc})") from exc


def _read_regular(path: str) -> bytes:
    # a job may have left a FIFO or a device here: never block on open, never read unbounded
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    with open(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = file.read(_MAX_FILE_BYTES + 1)
    if len(data) > _MAX_FILE_BYTES:
        raise OSError(errno.EFBIG, "larger than 1 MiB")
    return data


class DirtyTreeGate:
    name = "dirty-tree"  # not a reason: the gate's own name

    def __init__(self, timeout_s: float = 10.0, git: str = "git") -> None:
        self._timeout_s = timeout_s
        self._git = git

    async def check(self, pickup: Pickup) -> Decision:
        job = pickup.job
        if job.kind != "local" or not job.folder or job.force:
            return ADMIT
        base = job.target()
        try:
            repo = await self._inspect(job.folder)
        except _Unsafe as exc:
            return Refuse(
                DIRTY_TREE,
                f"cannot check {base} safely: {exc}; clean it up or submit with --force",
            )
        except TimeoutError:
            why = f"reading its git config took longer than {self._timeout_s:g} s"
            return _cannot_tell(base, why)
        if repo is None:
            return ADMIT
        changes, why = await self._status(job.folder, repo)
        if why:
            return _cannot_tell(base, why)
        if changes:
            return Refuse(
                DIRTY_TREE,
                f"{base} has uncommitted changes (git status is not clean); commit or stash "
                "them, or submit the job with force",
            )
        return ADMIT

    async def _inspect(self, folder: str) -> _Repo | None:
        # the folder may sit on a slow mount: off the event loop, and not waited on forever
        with anyio.fail_after(self._timeout_s):
            return await anyio.to_thread.run_sync(_inspect_repo, folder, abandon_on_cancel=True)

    async def _status(self, folder: str, repo: _Repo) -> tuple[bool, str]:
        """(whether anything is uncommitted, why git could not tell: empty when it could)."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv(folder, repo),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=_git_env(),
            )
        except FileNotFoundError:
            return False, "git is not installed"
        except OSError as exc:
            return False, f"git could not start ({_redact(exc.strerror or str(exc))})"
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self._timeout_s)
        except TimeoutError:
            return False, f"git status took longer than {self._timeout_s:g} s"
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if proc.returncode != 0:
            return False, f"git status exited {proc.returncode}: {_first_line(err)}"
        return bool(out.strip()), ""

    def _argv(self, folder: str, repo: _Repo) -> list[str]:
        # the git dir and work tree are the ones scanned, not whatever git would discover now;
        # a submodule's own status would load its config, which was not scanned
        return [
            self._git,
            *("-c", "safe.directory=*"),
            *("-c", "core.fsmonitor=false"),
            *("-c", "core.hooksPath=/dev/null"),
            *("-C", folder),
            f"--git-dir={repo.gitdir}",
            f"--work-tree={repo.top}",
            *("status", "--porcelain", "--untracked-files=normal", "--ignore-submodules=dirty"),
        ]


def _cannot_tell(base: str, why: str) -> Refuse:
    return Refuse(DIRTY_TREE, f"cannot tell whether {base} has uncommitted changes: {why}")


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_OPTIONAL_LOCKS"] = "0"
    env["LC_ALL"] = "C"
    return env


def _first_line(err: bytes) -> str:
    """git's own verdict ("fatal: ..."), not a warning printed before it."""
    lines = [line.strip() for line in err.decode(errors="replace").splitlines() if line.strip()]
    verdict = next((line for line in lines if line.startswith(("fatal", "error"))), None)
    return _redact(verdict or (lines[0] if lines else "no message"))


def _redact(text: str) -> str:
    """git's messages quote full paths; keep each path's last component only."""
    return _ABSOLUTE_PATH.sub(lambda m: posixpath.basename(m[0].rstrip("/")) or "/", text)
