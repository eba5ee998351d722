"""Where a folder's repository lives, read as plain files that must lie inside the allowed roots.

The dirty-tree gate (`gate.py`) never lets git discover a repository by itself. This module
finds it as git would: the first `.git` up from the folder, a `.git` file's `gitdir:`, a
`commondir`. Every place git is later pointed at must resolve (symlinks followed) inside the
bounds: the allowed roots (`DISPATCH_ALLOWED_ROOTS`), or the work tree itself when there are
none. That covers the work tree, the git directory, the common directory, the object directory,
every alternate (nested ones too, as deep as git follows them) and every symlink in the object
directory. A file is read here only after its resolved path is checked, without following a
last symlink, never from a FIFO or a device, and only up to a size limit.

Two failures, both refusals: `Unsafe` keeps the sentences of the gate's first version (a `.git`
file or `commondir` that names nothing, a config that cannot be read: `dirty-tree`);
`Unreadable` is a repository that reaches outside the bounds, or whose HEAD, refs or index
cannot be read (`repo-unreadable`).
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass

from dispatch.host.files import TooLarge, read_bounded
from dispatch.reasons import DIRTY_TREE, REPO_UNREADABLE

SMALL = 1 << 20  # config, HEAD, a ref, a pointer file, info/exclude
LARGE = 1 << 30  # the index, packed-refs
_ALTERNATE_DEPTH = 5  # git follows alternates of alternates this deep, no deeper
_OID = re.compile(rb"[0-9a-f]{40}(?:[0-9a-f]{24})?")
# what git's check-ref-format refuses, for the names a HEAD may point to
_BAD_REF = re.compile(rb"[\x00-\x20\x7f~^:?*\[\\]|\.\.|//|@\{|/\.|\.lock(?:/|$)|[/.]$")
_MAX_SYMREFS = 5


class Unsafe(Exception):
    """Why the repository cannot be checked without trusting what a job wrote."""

    reason = DIRTY_TREE
    advice = "clean it up or submit with --force"


class Unreadable(Unsafe):
    """The repository reaches outside the bounds, or a file git needs cannot be read."""

    reason = REPO_UNREADABLE
    advice = "repair the repository or submit with --force"


@dataclass(frozen=True, slots=True)
class Bounds:
    roots: tuple[str, ...]  # resolved
    name: str  # how a sentence calls them

    @classmethod
    def of(cls, roots: tuple[str, ...], top: str) -> Bounds:
        if roots:
            return cls(tuple(os.path.realpath(r) for r in roots), "DISPATCH_ALLOWED_ROOTS")
        return cls((top,), "its work tree")

    def resolve(self, path: str, what: str) -> str:
        """The path with every symlink followed; Unreadable when that leaves the bounds."""
        real = os.path.realpath(path)
        if not any(real == root or real.startswith(root.rstrip("/") + "/") for root in self.roots):
            raise Unreadable(f"{what} lies outside {self.name}")
        return real

    def read(
        self, path: str, what: str, limit: int = SMALL, error: type[Unsafe] = Unreadable
    ) -> bytes | None:
        """A regular file's bytes, None when there is none."""
        real = self.resolve(path, what)
        try:
            return read_regular(real, limit)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise error(f"{what} cannot be read ({exc.strerror or exc})") from exc


@dataclass(frozen=True, slots=True)
class Layout:
    top: str  # the work tree: the folder holding `.git`, resolved
    gitdir: str  # resolved, as every path below
    common: str  # the gitdir itself, unless a `commondir` names another
    bounds: Bounds

    @property
    def objects(self) -> str:
        return posixpath.join(self.common, "objects")


def find_layout(folder: str, roots: tuple[str, ...]) -> Layout | None:
    """The repository git would use for the folder, None when there is none. Touches the
    filesystem: run it in a worker thread."""
    dotgit = _find_dotgit(os.path.realpath(folder))
    if dotgit is None:
        return None
    top = posixpath.dirname(dotgit)
    bounds = Bounds.of(roots, top)
    bounds.resolve(top, "its repository")
    gitdir = git_dir_of(dotgit, bounds)
    return Layout(top, gitdir, common_dir_of(gitdir, bounds), bounds)


def _find_dotgit(path: str) -> str | None:
    """The first `.git` (a directory, or a file as in worktrees and submodules) in the folder
    or one of its parents; without one there is no work tree to ask about."""
    while True:
        dotgit = posixpath.join(path, ".git")
        if os.path.lexists(dotgit):
            return dotgit
        parent = posixpath.dirname(path)
        if parent == path:
            return None
        path = parent


def git_dir_of(dotgit: str, bounds: Bounds) -> str:
    """The git directory a `.git` entry stands for, resolved inside the bounds."""
    if os.path.isdir(dotgit):
        return bounds.resolve(dotgit, "its .git directory")
    if not os.path.isfile(dotgit):
        raise Unsafe("its .git is neither a file nor a directory")
    data = bounds.read(dotgit, "its .git file", error=Unsafe)
    gitdir = _pointer(data, b"gitdir: ", dotgit, "its .git file")
    if not os.path.isdir(gitdir):
        raise Unsafe("its .git file points to no git directory")
    return bounds.resolve(gitdir, "the git directory its .git file names")


def common_dir_of(gitdir: str, bounds: Bounds) -> str:
    commondir = posixpath.join(gitdir, "commondir")
    data = bounds.read(commondir, "its commondir file", error=Unsafe)
    if data is None:
        return gitdir
    common = _pointer(data, b"", commondir, "its commondir file")
    return bounds.resolve(common, "the common git directory its commondir file names")


def _pointer(data: bytes | None, prefix: bytes, source: str, what: str) -> str:
    """The path a `.git` file or `commondir` names, as git reads it: trailing line ends
    dropped, relative to the folder holding the file."""
    path = (data or b"").removeprefix(prefix).rstrip(b"\r\n")
    if data is None or not data.startswith(prefix) or not path or b"\n" in path or b"\0" in path:
        raise Unsafe(f"{what} does not name a git directory")
    return posixpath.join(posixpath.dirname(source), os.fsdecode(path))


def check_objects(layout: Layout) -> None:
    """The object directory and every alternate lie inside the bounds, symlinks included."""
    objects = layout.bounds.resolve(layout.objects, "its object directory")
    if not os.path.isdir(objects):
        raise Unreadable("it has no object directory")
    _check_alternates(objects, layout.bounds, 0)


def _check_alternates(objects: str, bounds: Bounds, depth: int) -> None:
    _check_symlinks(objects, bounds)
    path = posixpath.join(objects, "info", "alternates")
    for line in (bounds.read(path, "its alternates file") or b"").split(b"\n"):
        if not line or line.startswith(b"#"):
            continue
        if line.startswith(b'"') or b"\0" in line:
            raise Unreadable("its alternates file names a path git would unquote")
        if depth + 1 >= _ALTERNATE_DEPTH:
            raise Unreadable("its alternates nest deeper than git follows them")
        alternate = posixpath.join(objects, os.fsdecode(line.rstrip(b"\r")))
        alternate = bounds.resolve(alternate, "an object directory its alternates file names")
        if os.path.isdir(alternate):
            _check_alternates(alternate, bounds, depth + 1)


def _check_symlinks(objects: str, bounds: Bounds) -> None:
    # objects/<xx>/<rest>, objects/pack/*, objects/info/*: two levels hold everything git opens
    for entry in _entries(objects):
        if entry.is_symlink():
            bounds.resolve(entry.path, "a file in its object directory")
        elif entry.is_dir(follow_symlinks=False):
            for inner in _entries(entry.path):
                if inner.is_symlink():
                    bounds.resolve(inner.path, "a file in its object directory")


def _entries(path: str) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(path) as entries:
            yield from entries
    except FileNotFoundError:
        return  # removed meanwhile (a `git gc` prunes emptied folders): nothing left to open
    except OSError as exc:
        raise Unreadable(f"its object directory cannot be read ({exc.strerror or exc})") from exc


def head_of(layout: Layout) -> tuple[str | None, bytes]:
    """(the object id HEAD resolves to, or None for a branch with no commit yet; the name of
    that branch, or b"" for a detached HEAD). Follows loose refs, then `packed-refs`."""
    data = layout.bounds.read(posixpath.join(layout.gitdir, "HEAD"), "its HEAD")
    ref = b""
    for _ in range(_MAX_SYMREFS):
        value = (data or b"").rstrip()
        if _OID.fullmatch(value):
            return value.decode(), ref
        if data is None and ref:
            return None, ref
        if not value.startswith(b"ref: "):
            raise Unreadable("its HEAD is not a commit or a branch")
        ref = value.removeprefix(b"ref: ").strip()
        if not ref.startswith(b"refs/") or _BAD_REF.search(ref):
            raise Unreadable("its HEAD names a branch git would not accept")
        data = _ref_value(layout, ref)
    raise Unreadable("its HEAD is a longer chain of references than git follows")


def _ref_value(layout: Layout, ref: bytes) -> bytes | None:
    loose = layout.bounds.read(posixpath.join(layout.common, os.fsdecode(ref)), "one of its refs")
    if loose is not None:
        return loose
    path = posixpath.join(layout.common, "packed-refs")
    packed = layout.bounds.read(path, "its packed-refs file", LARGE) or b""
    line = re.search(
        rb"^([0-9a-f]{40}(?:[0-9a-f]{24})?) " + re.escape(ref) + rb"\r?$", packed, re.M
    )
    return line[1] if line else None


def read_regular(path: str, limit: int) -> bytes:
    """A regular file's bytes, no last symlink followed; OSError when it is larger."""
    # a job may have left a FIFO or a device here: never block on open, never read unbounded
    try:
        return read_bounded(path, limit)
    except TooLarge:
        raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB") from None
