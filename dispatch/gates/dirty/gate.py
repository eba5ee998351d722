"""Dirty-tree gate: a local job edits its folder in place, so a folder inside a git work tree
with uncommitted changes (untracked files included) is refused `dirty-tree` unless the job
says `force`. When git cannot answer (not installed, fails, times out) the job is refused as
well: running in place is only safe when we know the tree is clean.

The repository is the job's to write: an earlier job's container had the folder mounted
read-write. Its config can name commands (filters, fsmonitor, `uploadpack` on a partial clone,
`core.sshCommand`, `ext::` transports, includes pulling any of them in) and its files can point
anywhere (a `.git` file, `commondir`, alternates, symlinks). So git runs on the host, as it
must to be fast on a large tree, but never with the repository's own git directory: it gets a
private stand-in (`git_shadow.py`) with an allow-listed config, HEAD resolved to an object id,
copies of the index and `info/exclude`, and a pinned environment (no system or global config,
no protocol, no lazy fetch, no hooks, no fsmonitor). Objects are read in place, once
`git_layout.py` has found every path git will open inside the allowed roots. What cannot be
checked that way is refused `repo-unreadable`, saying what is wrong. Why not the other ways
the issue weighed: a `git status` container costs a container start per pickup and an image
with git on every host; a status without git must match git's ignore, racy-stat and
line-ending rules exactly (and dulwich opens the repo's own config and alternates), and a
verdict that differs from the operator's `git status` either refuses clean trees or lets dirty
ones through. docs/dirty-tree.md has the whole list of what is pinned and why.

The check is three git runs (`ls-files` first only when the index holds a submodule):
`status --ignore-submodules=all` (so git never opens a submodule's config), then `diff-index
--cached` (staged changes to submodules, which that status hides), and each submodule's HEAD
is compared with the index here, resolved inside the roots. The configs are still scanned
first for `[filter`, `[include` and `fsmonitor`: not the guard any more, but a trap set for the
operator's own git in that folder, refused `dirty-tree` so they hear of it. The whole check
shares one time bound. Sentences name the folder's basename only: records are shared
fleet-wide.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import re
import tempfile
from collections.abc import Callable
from typing import TypeVar

import anyio

from dispatch.gates.base import ADMIT, Decision, Pickup, Refuse
from dispatch.gates.dirty.layout import (
    Layout,
    Unreadable,
    Unsafe,
    check_objects,
    common_dir_of,
    find_layout,
    git_dir_of,
    head_of,
)
from dispatch.gates.dirty.shadow import Shadow, build_shadow
from dispatch.host.commands import GIT, reap, spawn
from dispatch.host.text import reply_lines
from dispatch.reasons import DIRTY_TREE

_T = TypeVar("_T")
_ABSOLUTE_PATH = re.compile(r"/[^\s'\"`:]+")
# git opens a section after any whitespace or `]`, mid-line too, so none of these is anchored
_HAZARDS = (
    (re.compile(rb"\[\s*filter", re.IGNORECASE), "a filter driver"),
    (re.compile(rb"\[\s*include", re.IGNORECASE), "an include"),
    (re.compile(rb"fsmonitor", re.IGNORECASE), "an fsmonitor command"),
)
_EMPTY_TREE = {
    False: "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
    True: "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321",
}
_STATUS = ("status", "--porcelain", "--untracked-files=normal", "--ignore-submodules=all")


class _CannotTell(Exception):
    """git could not answer: not installed, failed, or out of time."""


def _prepare(folder: str, roots: tuple[str, ...], scratch: str) -> Shadow | None:
    """The stand-in git directory for the folder's repository, None when there is none."""
    layout = find_layout(folder, roots)
    if layout is None:
        return None
    _scan_config(layout)
    check_objects(layout)
    return build_shadow(layout, scratch)


def _scan_config(layout: Layout) -> None:
    common = posixpath.join(layout.common, "config")
    for path in (common, posixpath.join(layout.gitdir, "config.worktree")):
        text = layout.bounds.read(path, "its git config", error=Unsafe) or b""
        for pattern, what in _HAZARDS:
            if pattern.search(text):
                raise Unsafe(f"its git config defines {what}")


def _gitlinks(listing: bytes) -> list[tuple[str, str]]:
    """(path, object id) of each submodule in `git ls-files --stage -z` output."""
    links = []
    for entry in listing.split(b"\0"):
        if entry.startswith(b"160000 "):
            info, _, path = entry.partition(b"\t")
            links.append((os.fsdecode(path), info.split(b" ")[1].decode()))
    return links


def _moved_submodule(layout: Layout, links: list[tuple[str, str]]) -> bool:
    """Whether a checked-out submodule's HEAD is not the commit the index records."""
    for path, oid in links:
        parts = path.split("/")
        if any(part in ("", ".", "..", ".git") for part in parts):
            raise Unreadable("its index names a submodule path git would not accept")
        name = parts[-1]
        try:
            top = layout.bounds.resolve(posixpath.join(layout.top, path), "one of its submodules")
            dotgit = posixpath.join(top, ".git")
            if not os.path.lexists(dotgit):
                continue  # not checked out: git does not count it either
            gitdir = git_dir_of(dotgit, layout.bounds)
            sub = Layout(top, gitdir, common_dir_of(gitdir, layout.bounds), layout.bounds)
            if head_of(sub)[0] != oid:
                return True
        except Unsafe as exc:
            raise Unreadable(f"in its submodule {name}, {exc}") from exc
    return False


class DirtyTreeGate:
    name = "dirty-tree"  # not a reason: the gate's own name

    def __init__(
        self, timeout_s: float = 10.0, git: str = "git", roots: tuple[str, ...] = ()
    ) -> None:
        self._timeout_s = timeout_s
        self._git = git
        self._roots = roots  # DISPATCH_ALLOWED_ROOTS; none: the work tree bounds itself

    async def check(self, pickup: Pickup) -> Decision:
        job, folder = pickup.job, pickup.real_folder
        if not folder or job.force:
            return ADMIT
        base = job.target()
        deadline = anyio.current_time() + self._timeout_s
        with tempfile.TemporaryDirectory(prefix="dispatch-git-", ignore_cleanup_errors=True) as tmp:
            try:
                changes = await self._changes(folder, tmp, deadline)
            except Unsafe as exc:
                return Refuse(exc.reason, f"cannot check {base} safely: {exc}; {exc.advice}")
            except _CannotTell as exc:
                return Refuse(
                    DIRTY_TREE, f"cannot tell whether {base} has uncommitted changes: {exc}"
                )
        if changes:
            return Refuse(
                DIRTY_TREE,
                f"{base} has uncommitted changes (git status is not clean); commit or stash "
                "them, or submit the job with force",
            )
        return ADMIT

    async def _changes(self, folder: str, scratch: str, deadline: float) -> bool:
        shadow = await self._thread(deadline, _prepare, folder, self._roots, scratch)
        if shadow is None:
            return False
        if shadow.maybe_gitlinks:
            links = _gitlinks(await self._run(shadow, deadline, "ls-files", "--stage", "-z"))
            moved: bool = await self._thread(deadline, _moved_submodule, shadow.layout, links)
            if moved:
                return True
        if (await self._run(shadow, deadline, *_STATUS)).strip():
            return True
        base = shadow.head or _EMPTY_TREE[shadow.sha256]
        cached = ("diff-index", "--cached", "--quiet", "--ignore-submodules=none", base, "--")
        return await self._run(shadow, deadline, *cached, quiet=True) == b"changed"

    async def _thread(self, deadline: float, func: Callable[..., _T], *args: object) -> _T:
        # the folder may sit on a slow mount: off the event loop, and not waited on forever
        try:
            with anyio.fail_after(max(deadline - anyio.current_time(), 0)):
                return await anyio.to_thread.run_sync(func, *args, abandon_on_cancel=True)
        except TimeoutError:
            why = f"reading its repository took longer than {self._timeout_s:g} s"
            raise _CannotTell(why) from None

    async def _run(self, shadow: Shadow, deadline: float, *args: str, quiet: bool = False) -> bytes:
        """git's output; with `quiet`, b"changed" for exit 1. _CannotTell when git fails."""
        argv = [self._git, "--no-pager", *_pinned_flags(), *args]
        try:
            proc = await spawn(argv, GIT, shadow.env(), cwd=shadow.layout.top)
        except FileNotFoundError:
            raise _CannotTell("git is not installed") from None
        except OSError as exc:
            why = _redact(exc.strerror or str(exc))
            raise _CannotTell(f"git could not start ({why})") from None
        out, err = await self._wait(proc, deadline, args[0])
        if quiet and proc.returncode == 1:
            return b"changed"
        if proc.returncode != 0:
            raise _CannotTell(f"git {args[0]} exited {proc.returncode}: {_first_line(err)}")
        return out

    async def _wait(
        self, proc: asyncio.subprocess.Process, deadline: float, command: str
    ) -> tuple[bytes, bytes]:
        try:
            remaining = max(deadline - anyio.current_time(), 0)
            return await asyncio.wait_for(proc.communicate(), remaining)
        except TimeoutError:
            raise _CannotTell(f"git {command} took longer than {self._timeout_s:g} s") from None
        finally:
            await reap(proc, GIT)


def _pinned_flags() -> list[str]:
    # repeated on the command line, above any config git could still find
    pinned = ("core.fsmonitor=false", "core.hooksPath=/dev/null", "core.untrackedCache=false")
    return [arg for value in (*pinned, "protocol.allow=never") for arg in ("-c", value)]


def _first_line(err: bytes) -> str:
    """git's own verdict ("fatal: ..."), not a warning printed before it."""
    lines = list(reply_lines(err))
    verdict = next((line for line in lines if line.startswith(("fatal", "error"))), None)
    return _redact(verdict or (lines[0] if lines else "no message"))


def _redact(text: str) -> str:
    """git's messages quote full paths; keep each path's last component only."""
    return _ABSOLUTE_PATH.sub(lambda m: posixpath.basename(m[0].rstrip("/")) or "/", text)
