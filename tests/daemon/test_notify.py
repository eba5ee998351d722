"""systemd's notify protocol on a real datagram socket the test binds: what the daemon says,
and that a wedged event loop (a blocking call injected into it) stops the watchdog's pings,
as does a lock keeper that stopped ticking. The real daemon's own messages, in order, are in
tests/e2e/test_notify.py."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from dispatch.daemon.notify import LAG_MAX_S, Notifier, Watchdog
from tests.support.notify_socket import Listener, listening
from tests.support.polling import eventually, eventually_sync

pytestmark = pytest.mark.anyio


async def arrived(heard: Listener, when: Callable[[float], bool], n: int = 1) -> bool:
    return sum(1 for t, _ in heard.messages if when(t)) >= n


def test_outside_systemd_nothing_is_sent_and_nothing_fails() -> None:
    quiet = Notifier({})
    assert not quiet.enabled and quiet.watchdog_s is None
    quiet.ready("x")
    quiet.stopping()


def test_messages_reach_the_socket_as_key_value_lines(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    with listening(path) as heard:
        n = Notifier({"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "30000000"})
        assert n.watchdog_s == 30.0
        n.ready("0/3 slots")
        n.status("1/3 slots")
        n.reloading()
        n.stopping("draining: 1 running")
        eventually_sync(lambda: len(heard.messages) == 4, 5)
    said = [fields for _, fields in heard.messages]
    assert said[0] == {"READY": "1", "STATUS": "0/3 slots"}
    assert said[1] == {"STATUS": "1/3 slots"}
    assert said[2]["RELOADING"] == "1" and int(said[2]["MONOTONIC_USEC"]) > 0
    assert said[3] == {"STOPPING": "1", "STATUS": "draining: 1 running"}


def test_an_abstract_socket_name_is_reached_too() -> None:
    name = f"dispatch-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    try:
        Notifier({"NOTIFY_SOCKET": "@" + name}).ready()
        assert sock.recv(100) == b"READY=1"
    finally:
        sock.close()


def test_a_socket_that_is_gone_is_logged_once_and_never_raises(tmp_path: Path, logged) -> None:
    n = Notifier({"NOTIFY_SOCKET": str(tmp_path / "nobody")})
    for _ in range(3):
        n.status("x")
    assert logged.getvalue().count('"notify_failed"') == 1


def test_the_process_environment_is_taken_so_jobs_do_not_inherit_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "s"))
    monkeypatch.setenv("WATCHDOG_USEC", "2000000")
    n = Notifier()
    assert n.address == str(tmp_path / "s") and n.watchdog_s == 2.0
    assert "NOTIFY_SOCKET" not in os.environ and "WATCHDOG_USEC" not in os.environ


async def test_a_wedged_loop_sends_no_watchdog_until_it_runs_well_again(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    with listening(path) as heard:
        n = Notifier({"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "200000"})  # a ping / 0.1 s
        dog = Watchdog(n, time.monotonic, every_s=0.1, lag_max_s=0.5)
        stop = asyncio.Event()
        task = asyncio.create_task(dog.run(stop))
        await eventually(lambda: arrived(heard, lambda t: True, 3), 5)
        wedged_at = time.monotonic()
        time.sleep(1.0)  # the injected blocking call: nothing in the loop runs
        freed_at = time.monotonic()
        await eventually(lambda: arrived(heard, lambda t: t > freed_at + 0.15), 5)
        stop.set()
        await task
    during = [t for t, _ in heard.messages if wedged_at + 0.01 < t < freed_at]
    assert during == []
    after = sorted(t for t, _ in heard.messages if t >= freed_at)
    assert after[0] - freed_at > 0.05  # the first wake saw the lag and skipped its ping
    assert {key for _, fields in heard.messages for key in fields} == {"WATCHDOG"}


async def test_a_lock_keeper_that_stopped_ticking_stops_the_pings(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    with listening(path) as heard:
        n = Notifier({"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "200000"})
        ticked = [time.monotonic()]
        dog = Watchdog(n, lambda: ticked[0], every_s=0.1)
        assert dog.healthy()
        ticked[0] -= 3 * 0.1 + LAG_MAX_S + 1  # its last tick long ago: the keeper is stuck
        assert not dog.healthy()
        stop = asyncio.Event()
        task = asyncio.create_task(dog.run(stop))
        await asyncio.sleep(0.5)  # five periods of pings that must not come
        stop.set()
        await task
    assert heard.messages == []


async def test_a_config_reload_is_told_as_reloading_then_ready(tmp_path: Path) -> None:
    import json

    from dispatch.clock import SystemClock
    from dispatch.config.watcher import ConfigFiles
    from dispatch.daemon.assembly import follow_config

    path, config_dir = tmp_path / "notify", tmp_path / "config"
    config_dir.mkdir()
    files = ConfigFiles(config_dir, SystemClock(), check_every_s=0.0)
    with listening(path) as heard:
        stop = asyncio.Event()
        n = Notifier({"NOTIFY_SOCKET": str(path)})
        task = asyncio.create_task(follow_config(files, [], stop, n, every_s=0.02))
        await asyncio.sleep(0.1)  # a few looks at an unchanged dir: nothing to tell
        assert heard.messages == []
        changed = {"version": 1, "settings": {"model": "m1"}}
        (config_dir / "settings.json").write_text(json.dumps(changed))
        await eventually(lambda: arrived(heard, lambda t: True, 2), 5)
        stop.set()
        await task
    assert heard.said() == ["RELOADING", "READY"]
