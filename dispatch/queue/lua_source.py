"""The Lua scripts in `lua/` as files: each one's source, SHA and declared keys, and what their
negative reply codes mean. No Redis client here: `dispatch.queue.scripts` calls them through
redis-py, the CLI's quick path (cli/quick.py) through a plain socket.

The scripts are found by `lua_dir`: in an installed wheel they sit inside the package
(`dispatch/lua/`, copied there at build time from the repository's top-level `lua/`); in a source
checkout or an editable install, the package has no `lua/` and the top-level folder is read as is.

`BAD_INPUT` (-4) is a refused call: a wrong key count, argument count, or a field out of shape or
bounds (lua/README.md lists the bounds). The script answers it before its first write, so
nothing changed; it becomes `BadCall`, which is not a Redis fault and is never retried as one.
Being a reply value rather than an error reply, it cannot be mistaken for one by any client.
"""

from __future__ import annotations

import hashlib
import re
from enum import IntEnum
from functools import cache
from pathlib import Path
from typing import Any

from dispatch.errors import (
    BadCall,
    ConfigError,
    Conflict,
    InvalidJob,
    LockLost,
    NotFound,
    ScriptError,
)

Arg = str | int | float | bytes


class Code(IntEnum):
    LOCK_LOST = -1
    NOT_FOUND = -2
    CONFLICT = -3
    BAD_INPUT = -4


_ERRORS: dict[int, type[ScriptError] | type[InvalidJob]] = {
    Code.LOCK_LOST: LockLost,
    Code.NOT_FOUND: NotFound,
    Code.CONFLICT: Conflict,
    Code.BAD_INPUT: BadCall,
}
_BAD_CALL = (
    "refused as a bad call (a key or argument missing or too many, or a field out of shape or"
    " bounds); nothing was written"
)


def raise_for(code: int, what: str) -> None:
    """Raise the exception that stands for a negative script code; do nothing otherwise."""
    if code == Code.BAD_INPUT:
        raise BadCall(f"{what}: {_BAD_CALL}")
    if code < 0:
        error = _ERRORS.get(code, ScriptError)
        raise error(
            f"{what}: {Code(code).name.lower() if code in Code._value2member_map_ else code}"
        )


def checked(reply: Any, what: str) -> Any:
    """The reply itself, unless it is a negative code: then the exception it stands for."""
    if isinstance(reply, int):
        raise_for(reply, what)
    return reply


@cache
def lua_dir() -> Path:
    """The folder of the scripts: the installed package's copy, else the checkout's `lua/`."""
    # pip unpacks a wheel onto disk, so the package's resources are plain files beside it
    # (importlib.resources would say the same, at the cost of loading it and tempfile)
    package = Path(__file__).resolve().parents[1]
    packaged, checkout = package / "lua", package.parent / "lua"
    for folder in (packaged, checkout):
        if folder.is_dir():
            return folder
    raise ConfigError(f"no Lua scripts in {packaged} or {checkout}: reinstall dispatch")


_HEADER_ITEM = re.compile(r"^(KEYS|ARGV)\[(\d+)\]", re.MULTILINE)


class LuaSource:
    """One Lua file: its source, the SHA it is called by, the KEYS and ARGV it declares."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = (lua_dir() / f"{name}.lua").read_text()
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    def declared(self, kind: str) -> int:
        """How many KEYS or ARGV the header lists (ARGV items past a stride are repeats)."""
        return max((int(n) for k, n in _HEADER_ITEM.findall(self.source) if k == kind), default=0)


@cache
def source(name: str) -> LuaSource:
    return LuaSource(name)
