"""The embedded default: a redis-server of our own, with AOF persistence in the state dir,
reached through a unix socket there. `dispatch up` starts it when no Redis URL is configured
and stops it on exit; a server already answering on the socket is reused, not restarted.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from dispatch.errors import ConfigError, RedisUnavailable


def socket_path(state_dir: Path) -> Path:
    return state_dir / "redis.sock"


def answering(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(0.5)
        try:
            s.connect(str(path))
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False


def start(state_dir: Path, timeout_s: float = 10.0) -> subprocess.Popen[bytes] | None:
    """Start redis-server unless one already answers; None when reusing a running one."""
    sock = socket_path(state_dir)
    if answering(sock):
        return None
    binary = shutil.which("redis-server") or shutil.which("valkey-server")
    if binary is None:
        raise ConfigError(
            "redis-server not found: install it (apt-get install redis-server)"
            " or set DISPATCH_REDIS_URL"
        )
    data = state_dir / "redis"
    data.mkdir(parents=True, exist_ok=True)
    sock.unlink(missing_ok=True)
    args = [
        binary,
        "--port",
        "0",
        "--unixsocket",
        str(sock),
        "--unixsocketperm",
        "700",
        "--dir",
        str(data),
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--maxmemory-policy",
        "noeviction",
        "--save",
        "",
    ]
    with open(data / "redis.log", "ab") as log:  # the server gets its own copy of the fd
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if answering(sock):
            return proc
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    proc.kill()
    raise RedisUnavailable(f"embedded redis-server did not start; see {data / 'redis.log'}")


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
