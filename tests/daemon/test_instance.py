"""One daemon per state dir and per host name, in one process on a real Redis: the state dir's
flock, the host name's hold (take, keep, lose, release) and their refusals. The same with real
daemon processes is in tests/faults/test_instance.py."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import msgspec
import pytest

from dispatch.config.settings import Settings
from dispatch.daemon.instance import HostOwner, hold_engine_name, hold_state_dir
from dispatch.errors import ConfigError, InstanceTaken
from dispatch.queue.keys import host_keys
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio


def settings(prefix: str, state: Path, lock_ms: int = 300) -> Settings:
    return Settings(
        redis_url="", embedded=False, prefix=prefix, host="h1", state_dir=state, lock_ms=lock_ms
    )


def test_a_state_dir_is_held_once_and_names_its_holder(tmp_path: Path) -> None:
    with hold_state_dir(tmp_path / "s", "h1") as held:
        assert (held.pid, held.host) == (os.getpid(), "h1")
        taken = rf"in use by another daemon \(pid {os.getpid()} "
        with pytest.raises(InstanceTaken, match=taken), hold_state_dir(tmp_path / "s", "h2"):
            pass
    with hold_state_dir(tmp_path / "s", "h2") as again:  # freed on the way out
        assert again.place == held.place  # the same lock file: the same place


def test_a_state_dir_that_cannot_be_made_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    unmade = tmp_path / "file" / "s"
    with pytest.raises(ConfigError, match="DISPATCH_STATE_DIR"), hold_state_dir(unmade, "h1"):
        pass


def test_an_engine_name_is_held_once_per_machine() -> None:
    engine = f"unix:///test/{uuid.uuid4().hex}.sock"  # a name no other test run binds
    with hold_engine_name(engine, "h1"):
        taken = rf"\(pid {os.getpid()}\)"
        with pytest.raises(InstanceTaken, match=taken), hold_engine_name(engine, "h1"):
            pass
        with hold_engine_name(engine, "h2"):  # another name is free
            pass
    with hold_engine_name(engine, "h1"):  # freed on the way out
        pass


async def test_a_host_name_is_held_by_one_owner_and_released_last(redis, prefix, tmp_path):
    with hold_state_dir(tmp_path / "a", "h1") as a, hold_state_dir(tmp_path / "b", "h1") as b:
        first = HostOwner(redis, settings(prefix, tmp_path / "a"), a)
        second = HostOwner(redis, settings(prefix, tmp_path / "b"), b)
        await first.take()
        with pytest.raises(InstanceTaken, match=rf"held by another daemon \(pid {os.getpid()} "):
            await second.take()
        await second.release()  # not its own: nothing changes
        assert await redis.get(first.key) == first.value
        await first.release()
        assert not await redis.exists(first.key)
        await second.take()


async def test_a_dead_holder_of_the_same_lock_file_is_taken_over(redis, prefix, tmp_path):
    with hold_state_dir(tmp_path / "s", "h1") as held:
        dead = HostOwner(redis, settings(prefix, tmp_path / "s", lock_ms=600_000), held)
        await dead.take()  # then the process died, leaving its key
    with hold_state_dir(tmp_path / "s", "h1") as held:
        successor = HostOwner(redis, settings(prefix, tmp_path / "s"), held)
        await successor.take()
        assert await redis.get(successor.key) == successor.value


async def test_a_holder_whose_name_was_taken_over_is_told_once(redis, prefix, tmp_path):
    with hold_state_dir(tmp_path / "s", "h1") as held:
        owner = HostOwner(redis, settings(prefix, tmp_path / "s"), held)
        await owner.take()
        lost, done = asyncio.Event(), asyncio.Event()
        keeper = asyncio.create_task(owner.keep(done, lost.set))
        await redis.delete(owner.key)  # lapsed while Redis was away: taken again
        await eventually(lambda: _holds(redis, owner), timeout=5)
        other = msgspec.json.encode({"pid": 1, "machine": "m2", "host": "h1", "state_dir": "/x",
                                     "since": "then"})  # fmt: skip
        await redis.set(host_keys("h1", prefix).owner, other)
        await asyncio.wait_for(lost.wait(), 5)
        await keeper
        assert owner.lost and owner.taker is not None and owner.taker.machine == "m2"
        assert "taken over by another daemon (pid 1 on m2" in str(owner.taken_over())
        await owner.release()
        assert await redis.get(owner.key) == other


async def _holds(redis, owner: HostOwner) -> bool:
    return bool(await redis.get(owner.key) == owner.value)
