"""`dispatch web` as a real process, the way an operator starts it: on a free loopback port,
with the test's environment (tests.support.daemons.cli_env), its output in a log beside the
state dir, up once it answers a page, stopped with SIGTERM at the end."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.daemons import SOURCE
from tests.support.polling import eventually_sync
from tests.support.redis_server import free_port

START_S = 20.0  # an import of the app and a first Redis read, on a busy 2-core machine
STOP_S = 10.0  # uvicorn gives open event streams 2 s (dispatch/web/serve.py), then exits


@contextmanager
def web(env: dict[str, str]) -> Iterator[str]:
    """The page's base URL (http://127.0.0.1:PORT) while the process serves it."""
    port = free_port()
    with open(web_log_path(env), "ab") as log:
        argv = [*SOURCE, "web", "--listen", f"127.0.0.1:{port}"]
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        eventually_sync(lambda: serving(proc, url, env), START_S)
        yield url
    finally:
        stop(proc)


def serving(proc: subprocess.Popen[bytes], url: str, env: dict[str, str]) -> bool:
    """Whether the page answers yet; an exited process fails the test with what it logged."""
    if proc.poll() is not None:
        raise AssertionError(f"dispatch web exited {proc.returncode}:\n{web_log(env)}")
    try:
        return httpx.get(f"{url}/signin", timeout=1.0).status_code == 200
    except httpx.TransportError:  # not listening yet
        return False


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def web_log_path(env: dict[str, str]) -> Path:
    """Beside the state dir, as the daemon's log is (tests.support.daemons.log_path)."""
    state = Path(env["DISPATCH_STATE_DIR"])
    state.parent.mkdir(parents=True, exist_ok=True)
    return state.with_name(state.name + ".web.log")


def web_log(env: dict[str, str]) -> str:
    path = web_log_path(env)
    return path.read_text(errors="replace") if path.exists() else ""
