"""`dispatch web` refuses, in one line and exit 2, what would expose the fleet or cannot work:
listening beyond loopback without a token, a malformed address, a token too short to be one
(whose value is never echoed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dispatch.web.serve import Refused, listen_address, loopback


def web(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DISPATCH_")}
    base["DISPATCH_REDIS_URL"] = "redis://127.0.0.1:1"  # never reached: each is refused first
    return subprocess.run(
        [sys.executable, "-m", "dispatch", "web", *args],
        env=base | env,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--listen", "0.0.0.0:8484"], {}, "refusing to listen on 0.0.0.0 without"),
        (["--listen", "[::]:8484"], {}, "refusing to listen on :: without"),
        (["--listen", "8484"], {}, "use HOST:PORT"),
        (["--listen", "127.0.0.1:70000"], {}, "use HOST:PORT"),
        (["--tls-cert", "c.pem"], {}, "go together"),
        ([], {"DISPATCH_WEB_TOKEN": "short-secret"}, "DISPATCH_WEB_TOKEN=(hidden)"),
        ([], {"DISPATCH_WEB_TOKEN_FILE": "/nonexistent/token"}, "cannot be read"),
    ],
)
def test_it_refuses_in_one_line(args: list[str], env: dict[str, str], said: str) -> None:
    done = web(*args, **env)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert "short-secret" not in done.stderr


def test_addresses() -> None:
    assert listen_address("127.0.0.1:8484") == ("127.0.0.1", 8484)
    assert listen_address("[::1]:9000") == ("::1", 9000)
    with pytest.raises(Refused):
        listen_address(":8484")
    assert loopback("127.0.0.5") and loopback("::1") and loopback("localhost")
    assert not loopback("10.0.0.1") and not loopback("example.org")
