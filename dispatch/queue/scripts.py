"""Loads the Lua scripts in `lua/` and calls them by SHA.

The scripts are found by `lua_dir`: in an installed wheel they sit inside the package
(`dispatch/lua/`, copied there at build time from the repository's top-level `lua/`); in a source
checkout or an editable install, the package has no `lua/` and the top-level folder is read as is.

Each script's SHA is computed locally; a call goes out as EVALSHA and, on NOSCRIPT (a restarted
or failed-over server), the source is loaded once and the call retried. Scripts return plain
values; negative integers are error codes, mirrored by `Code` and turned into exceptions by
`raise_for` (or `checked`, for a reply that is either a code or a value).

`BAD_INPUT` (-4) is a refused call: a wrong key count, argument count, or a field out of shape
or bounds (lua/README.md lists the bounds). The script answers it before its first write, so
nothing changed; it becomes `BadCall`, which is not a Redis fault and is never retried as one.
Being a reply value rather than an error reply, it cannot be mistaken for one by any client.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Sequence
from enum import IntEnum
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.client import Pipeline
from redis.exceptions import NoScriptError

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
    # pip unpacks a wheel onto disk, so the package's resources are plain files
    packaged = Path(str(files("dispatch") / "lua"))
    checkout = Path(__file__).resolve().parents[2] / "lua"
    for folder in (packaged, checkout):
        if folder.is_dir():
            return folder
    raise ConfigError(f"no Lua scripts in {packaged} or {checkout}: reinstall dispatch")


_HEADER_ITEM = re.compile(r"^(KEYS|ARGV)\[(\d+)\]", re.MULTILINE)


class Script:
    """One Lua file, called by SHA with a transparent reload on NOSCRIPT."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = (lua_dir() / f"{name}.lua").read_text()
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()

    def declared(self, kind: str) -> int:
        """How many KEYS or ARGV the header lists (ARGV items past a stride are repeats)."""
        return max((int(n) for k, n in _HEADER_ITEM.findall(self.source) if k == kind), default=0)

    async def __call__(self, redis: Redis, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        try:
            return await redis.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            await redis.script_load(self.source)
            return await redis.evalsha(self.sha, len(keys), *keys, *args)

    def queue(self, pipe: Pipeline, keys: Sequence[str], args: Sequence[Arg]) -> None:
        """Add the call to a pipeline; `load_all` must have run on this server first."""
        pipe.evalsha(self.sha, len(keys), *keys, *args)

    def command(self, keys: Sequence[str], args: Sequence[Arg]) -> tuple[Any, ...]:
        """The call as one command for `wire.send_all`."""
        return ("EVALSHA", self.sha, len(keys), *keys, *args)


@cache
def script(name: str) -> Script:
    return Script(name)


def all_scripts() -> list[Script]:
    return [script(p.stem) for p in sorted(lua_dir().glob("*.lua"))]


async def load_all(redis: Redis) -> None:
    """Load every script so pipelined EVALSHA calls cannot meet NOSCRIPT: on every primary of
    a cluster (redis-py sends a SCRIPT LOAD to each, one at a time, so the loads go at once)."""
    if isinstance(redis, RedisCluster):
        await asyncio.gather(*(redis.script_load(s.source) for s in all_scripts()))
        return
    async with redis.pipeline(transaction=False) as pipe:
        for s in all_scripts():
            pipe.script_load(s.source)
        await pipe.execute()
