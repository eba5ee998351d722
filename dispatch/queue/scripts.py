"""Calls the Lua scripts in `lua/` (dispatch/queue/lua_source.py reads them) by SHA.

Each script's SHA is computed locally; a call goes out as EVALSHA and, on NOSCRIPT (a restarted
or failed-over server), the source is loaded once and the call retried. Scripts return plain
values; negative integers are error codes, mirrored by `Code` and turned into exceptions by
`raise_for` (or `checked`, for a reply that is either a code or a value).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import cache
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.client import Pipeline
from redis.exceptions import NoScriptError

from dispatch.queue.lua_source import Arg as Arg
from dispatch.queue.lua_source import Code as Code
from dispatch.queue.lua_source import LuaSource
from dispatch.queue.lua_source import checked as checked
from dispatch.queue.lua_source import lua_dir as lua_dir
from dispatch.queue.lua_source import raise_for as raise_for


class Script(LuaSource):
    """One Lua file, called by SHA with a transparent reload on NOSCRIPT."""

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
