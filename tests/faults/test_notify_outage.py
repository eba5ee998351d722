"""A Redis outage must not get the daemon restarted by systemd's watchdog: with Redis frozen
(the proxy answers nothing) the real daemon's loop and lock keeper still run, bounded calls
failing, so WATCHDOG=1 keeps coming on a real notify socket; the daemon rides the outage out."""

from __future__ import annotations

from pathlib import Path

from tests.support.daemons import cli_env, daemon
from tests.support.notify_socket import listening
from tests.support.polling import eventually_sync
from tests.support.redis_proxy import RedisProxy


def test_the_watchdog_keeps_pinging_while_redis_is_frozen(
    prefix: str, tmp_path: Path, proxy: RedisProxy
) -> None:
    path = tmp_path / "notify"
    env = cli_env(
        proxy.url, prefix, tmp_path / "state", DISPATCH_HOST="frozen-redis",
        NOTIFY_SOCKET=str(path), WATCHDOG_USEC="1000000",
    )  # fmt: skip
    with listening(path) as heard, daemon(env) as proc:
        eventually_sync(lambda: heard.said().count("WATCHDOG") >= 2, 30)
        with proxy.fault("blackhole"):
            before = heard.said().count("WATCHDOG")
            # 30 half-periods (15 s) with no Redis: past the point (3 renewal periods + 5 s
            # = 11 s) where a lock keeper stuck on a call would make the watchdog go quiet,
            # and past every call's own bound
            eventually_sync(lambda: heard.said().count("WATCHDOG") >= before + 30, 30)
            assert proc.poll() is None
        eventually_sync(lambda: heard.said().count("WATCHDOG") >= before + 32, 10)
