"""`dispatch web` as a real process, the way an operator starts it: on a free loopback port,
with the test's environment (tests.support.daemons.cli_env), its output in a log beside the
state dir, up once it answers a page, stopped with SIGTERM at the end."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.support.daemons import SOURCE, daemon_log, log_path, stop
from tests.support.polling import eventually_sync
from tests.support.redis_server import free_port

START_S = 20.0  # an import of the app and a first Redis read, on a busy 2-core machine
STOP_S = 10.0  # uvicorn gives open event streams 2 s (dispatch/web/serve.py), then exits


@contextmanager
def web(env: dict[str, str]) -> Iterator[str]:
    """The page's base URL (http://127.0.0.1:PORT) while the process serves it."""
    port = free_port()
    with open(log_path(env, "web"), "ab") as log:
        argv = [*SOURCE, "web", "--listen", f"127.0.0.1:{port}"]
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        eventually_sync(lambda: serving(proc, url, env), START_S)
        yield url
    finally:
        stop(proc, STOP_S)


def serving(proc: subprocess.Popen[bytes], url: str, env: dict[str, str]) -> bool:
    """Whether the page answers yet; an exited process fails the test with what it logged."""
    if proc.poll() is not None:
        raise AssertionError(f"dispatch web exited {proc.returncode}:\n{daemon_log(env, 'web')}")
    try:
        return httpx.get(f"{url}/signin", timeout=1.0).status_code == 200
    except httpx.TransportError:  # not listening yet
        return False
