"""`dispatch web` refuses, in one line and exit 2, what would expose the fleet or cannot work:
listening beyond loopback without a token, a malformed address, a token too short to be one
(whose value is never echoed)."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.web import serve
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


def test_an_unknown_option_is_one_line_too() -> None:
    done = web("--bogus")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("dispatch: unrecognized arguments: --bogus")


@settings(max_examples=150, deadline=None)
@given(
    argv=st.lists(
        st.sampled_from(["--listen", "--tls-cert", "--tls-key", "-h", "x", ""])
        | st.text(max_size=30),
        max_size=5,
    )
)
def test_any_arguments_start_it_or_refuse_in_one_line(argv: list[str]) -> None:
    """In-process, `_serve` replaced: whatever the arguments, it would serve or says why not
    in one line with exit 0 (help) or 2, never a traceback."""
    said = io.StringIO()
    with (
        mock.patch.object(serve, "_serve", return_value=0),
        mock.patch.dict(os.environ, {"DISPATCH_REDIS_URL": "redis://127.0.0.1:1"}),
        contextlib.redirect_stderr(said),
        contextlib.redirect_stdout(io.StringIO()),
        pytest.raises(SystemExit) as ended,
    ):
        serve.main(argv)
    assert ended.value.code in (0, 2)
    assert said.getvalue().count("\n") <= 1, said.getvalue()
