"""A private git directory standing in for a job-writable one, and the environment git runs in.

git on the host never sees the repository's own git directory: it is given a fresh one in a
scratch folder of the daemon's, holding only what `git status` needs to judge the work tree:

- `HEAD`: the object id `git_layout.head_of` resolved (or the name of a branch with no commit
  yet); no refs at all, so no replace refs and nothing to fetch.
- `config`: rebuilt from an allow-list of settings that change how the work tree is compared
  and name nothing to run or read (`_ALLOWED`); everything else (filters, fsmonitor, hooks,
  includes, remotes, `uploadpack`, `sshCommand`, `protocol.*`, `core.worktree`, partial-clone
  extensions) is simply not there.
- `index`, any split-index `sharedindex.*` and `info/exclude`: copies, times kept (git's racy
  check compares file times with the index's).

Objects are read where they are (`GIT_OBJECT_DIRECTORY`, checked with its alternates by
`git_layout.check_objects`). The environment drops everything of the daemon's but `PATH` and
pins the rest: no system or global config, an empty `HOME`, no protocol allowed, no lazy fetch,
no replace objects, no optional locks (the index is never written).
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass

from dispatch.gates.dirty.layout import LARGE, SMALL, Layout, Unreadable, head_of
from dispatch.host.commands import GIT

# a gitlink's mode in an index entry (0o160000, 32-bit big-endian): no such bytes, no submodule
GITLINK_MODE = b"\x00\x00\xe0\x00"
_SHARED_INDEX = re.compile(r"sharedindex\.[0-9a-f]{40}(?:[0-9a-f]{24})?")
_CHUNK = 1 << 20


def _flag(value: str | None) -> str | None:
    """git's boolean, spelled once; None for a value git would refuse."""
    if value is None:  # `key` alone means true
        return "true"
    word = value.lower()
    if word in ("true", "yes", "on") or (word.isdigit() and int(word) != 0):
        return "true"
    return "false" if word in ("false", "no", "off", "", "0") or word.isdigit() else None


_Parse = Callable[[str | None], str | None]


def _one_of(*words: str) -> _Parse:
    return lambda value: value.lower() if value and value.lower() in words else None


_ALLOWED: dict[str, _Parse] = {
    "core.repositoryformatversion": _one_of("0", "1"),
    "core.filemode": _flag,
    "core.symlinks": _flag,
    "core.ignorecase": _flag,
    "core.precomposeunicode": _flag,
    "core.trustctime": _flag,
    "core.checkstat": _one_of("default", "minimal"),
    "core.autocrlf": lambda value: "input" if (value or "").lower() == "input" else _flag(value),
    "core.eol": _one_of("lf", "crlf", "native"),
    "extensions.objectformat": _one_of("sha1", "sha256"),
}
# What the shadow's config always says: nothing watches, caches or hooks the work tree.
_PINNED = {
    "core.bare": "false",
    "core.fsmonitor": "false",
    "core.untrackedcache": "false",
    "core.hookspath": "/dev/null",
    "protocol.allow": "never",
}
_HEADER = re.compile(r'\s*\[\s*([A-Za-z0-9.-]*)\s*("(?:[^"\\\n]|\\.)*"\s*)?\]')
_ENTRY = re.compile(r"\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=(.*))?$")


def allowed_settings(text: bytes) -> dict[str, str]:
    """The allow-listed settings of a repository config, last value winning as in git. Never
    follows an include; a value it cannot read is left out (git's default applies)."""
    section, found = "", dict[str, str]()
    for line in text.decode("utf-8", "replace").replace("\\\n", "").splitlines():
        while header := _HEADER.match(line):
            section = header[1].lower() if header[2] is None else ""  # no subsection is kept
            line = line[header.end() :]
        entry = _ENTRY.match(line)
        parse = _ALLOWED.get(f"{section}.{entry[1].lower()}") if entry else None
        if entry is None or parse is None:
            continue
        raw = None if entry[2] is None else re.split(r"[#;]", entry[2])[0].strip().strip('"')
        value = parse(raw)
        key = f"{section}.{entry[1].lower()}"
        if value is None:
            found.pop(key, None)
        else:
            found[key] = value
    if "extensions.objectformat" in found:
        found["core.repositoryformatversion"] = "1"  # git reads extensions from version 1 on
    return found


def config_text(settings: dict[str, str]) -> str:
    sections: dict[str, list[str]] = {}
    for key, value in {**settings, **_PINNED}.items():
        section, name = key.split(".", 1)
        sections.setdefault(section, []).append(f"\t{name} = {value}\n")
    return "".join(f"[{section}]\n{''.join(lines)}" for section, lines in sections.items())


@dataclass(frozen=True, slots=True)
class Shadow:
    gitdir: str  # the private git directory
    home: str  # an empty HOME and XDG_CONFIG_HOME
    layout: Layout
    head: str | None  # None: a branch with no commit yet
    sha256: bool
    maybe_gitlinks: bool  # the index may hold a submodule

    def env(self) -> dict[str, str]:
        return {
            **GIT.inherited(),  # PATH
            "HOME": self.home,
            "XDG_CONFIG_HOME": self.home,
            "LC_ALL": "C",
            "GIT_DIR": self.gitdir,
            "GIT_WORK_TREE": self.layout.top,
            "GIT_OBJECT_DIRECTORY": self.layout.bounds.resolve(self.layout.objects, "objects"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_SYSTEM": "/dev/null",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_NO_LAZY_FETCH": "1",  # honoured from git 2.44; older ones have no remote to ask
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_OPTIONAL_LOCKS": "0",
            "GIT_ALLOW_PROTOCOL": "",  # set and empty: no transport at all
            "GIT_PROTOCOL_FROM_USER": "0",
            "GIT_TERMINAL_PROMPT": "0",
        }


def build_shadow(layout: Layout, scratch: str) -> Shadow:
    """Fill `scratch` (an empty private folder) with the stand-in git directory. Touches the
    filesystem: run it in a worker thread."""
    gitdir, home = posixpath.join(scratch, "git"), posixpath.join(scratch, "home")
    for path in (home, gitdir, *(posixpath.join(gitdir, d) for d in ("refs", "info"))):
        os.mkdir(path, 0o700)
    head, branch = head_of(layout)
    with open(posixpath.join(gitdir, "HEAD"), "w") as file:
        file.write(f"{head}\n" if head else f"ref: {os.fsdecode(branch)}\n")
    config = layout.bounds.read(posixpath.join(layout.common, "config"), "its git config")
    settings = allowed_settings(config or b"")
    with open(posixpath.join(gitdir, "config"), "w") as file:
        file.write(config_text(settings))
    exclude = posixpath.join("info", "exclude")
    _copy(layout, posixpath.join(layout.common, exclude), posixpath.join(gitdir, exclude), SMALL)
    links = _copy(layout, posixpath.join(layout.gitdir, "index"), gitdir + "/index", LARGE)
    for name in _shared_indexes(layout.gitdir):
        source = posixpath.join(layout.gitdir, name)
        links = _copy(layout, source, posixpath.join(gitdir, name), LARGE) or links
    sha256 = settings.get("extensions.objectformat") == "sha256"
    return Shadow(gitdir, home, layout, head, sha256, links)


def _shared_indexes(gitdir: str) -> list[str]:
    with os.scandir(gitdir) as entries:
        return [e.name for e in entries if _SHARED_INDEX.fullmatch(e.name)]


def _copy(layout: Layout, source: str, target: str, limit: int) -> bool:
    """Copy a regular file inside the bounds, times kept; whether it may hold a gitlink."""
    what = f"its {posixpath.basename(source)} file"
    real = layout.bounds.resolve(source, what)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise Unreadable(f"{what} cannot be read ({exc.strerror or exc})") from exc
    with open(fd, "rb") as file, open(target, "wb") as out:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            raise Unreadable(f"{what} is not a regular file of at most {limit >> 20} MiB")
        found, tail = False, b""
        while chunk := file.read(_CHUNK):
            out.write(chunk)
            found = found or GITLINK_MODE in tail + chunk
            tail = chunk[-3:]
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))
    return found
