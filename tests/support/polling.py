"""Polling with a deadline: tests wait for conditions, never for a fixed time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T | Literal[False] | None]],
    timeout: float = 10.0,
    every: float = 0.02,
) -> T:
    """Return check()'s first truthy value; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last value {value!r})")
        await asyncio.sleep(every)


def eventually_sync(
    check: Callable[[], T | Literal[False] | None], timeout: float = 10.0, every: float = 0.05
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last value {value!r})")
        time.sleep(every)


DAY_S = 86_400


def clear_of_midnight(within_s: float, now: Callable[[], float] = time.time) -> None:
    """Return once the next UTC midnight is more than `within_s` seconds off, waiting past it
    if need be. A test that counts a day window's runs against real daemons (whose clocks are
    the host's) must begin and end in one day: one that straddled midnight saw the lost run
    charged to the day it reserved in, and the rerun to the next."""
    eventually_sync(lambda: DAY_S - now() % DAY_S > within_s, within_s + 5, every=0.5)
