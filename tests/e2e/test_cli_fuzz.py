"""Random command lines, built from the real subcommands and option names mixed with garbage:
whatever they hold, the CLI exits 0, 1 or 2, says at most one line on stderr, and never shows
a traceback. In-process through `main(argv)` for breadth, then a few real processes.

The subcommands and their options are read from the parser itself, so a flag added later is
fuzzed too. `up` and `worker` are left out: they start a daemon and do not return; so is
`web`, which becomes the page's own process (tests/web/test_serve.py fuzzes its arguments),
and `service`, which installs units into this machine's systemd (tests/deploy/test_service.py).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dispatch.cli import main
from dispatch.cli.commands import _parser
from tests.support.daemons import cli_env, dispatch

_DAEMONS = {"up", "worker", "web", "service"}


def _subcommands() -> dict[str, list[str]]:
    """Each subcommand with its option strings, as the real parser declares them."""
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {
        name: [s for action in parser._actions for s in action.option_strings]
        for name, parser in sub.choices.items()
        if name not in _DAEMONS
    }


COMMANDS = _subcommands()
ALL_OPTIONS = sorted({o for opts in COMMANDS.values() for o in opts})

# values that have broken, or could break, a parser: numbers that are not numbers, sizes at
# and past the bounds, durations, instants, names, and what no job can carry
TRICKY = [
    "nan", "inf", "-inf", "-1", "0", "1", "3", "1e400", "9" * 30, "0.001", "0.01", "512",
    "513", "6m", "5m", "4g", "1t", "2t", "1.5GiB", "+1h", "+nan", "10s", "-5s", "1d",
    "2030-01-01T00:00:00Z", "2030-01-01T00:00:00", "yesterday", "jobs", "jobs@cli-host",
    "jobs@", "/tmp", "relative", "owner/name", "A=b", "=", "A", "-", "--", "", " ", "\n",
    "a\nb", "a\0b", "\udcff", "x" * (64 * 1024 + 1), "{", '{"id": "x"}', "true", "é",
]  # fmt: skip
values = st.one_of(
    st.sampled_from(TRICKY),
    st.text(max_size=12),
    st.from_regex(r"[a-z0-9.+-]{1,10}", fullmatch=True),
)


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    if draw(st.integers(0, 9)) == 0:  # now and then, no subcommand at all
        return draw(st.lists(st.sampled_from(ALL_OPTIONS) | values, max_size=4))
    name = draw(st.sampled_from(sorted(COMMANDS)))
    own = st.sampled_from(COMMANDS[name]) if COMMANDS[name] else values
    rest = draw(st.lists(st.one_of(own, own, values, st.sampled_from(ALL_OPTIONS)), max_size=7))
    return [name, *rest]


@pytest.fixture
def env(redis_url: str, prefix: str, tmp_path: Path) -> dict[str, str]:
    return cli_env(redis_url, prefix, tmp_path / "state", DISPATCH_HOST="cli-host")


@pytest.fixture
def in_env(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield


def run_main(argv: list[str], stdin: bytes) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))  # for `submit --json -`
    try:
        with redirect_stdout(out), redirect_stderr(err), pytest.raises(SystemExit) as exited:
            main(argv)
    finally:
        sys.stdin = saved
    code = exited.value.code
    return (code if isinstance(code, int) else -1), err.getvalue()


def assert_one_line(code: int, err: str, argv: list[str]) -> None:
    assert code in (0, 1, 2), (argv, code, err)
    assert err.count("\n") <= 1 and "Traceback" not in err, (argv, err)
    assert code == 0 or err.startswith("dispatch: "), (argv, code, err)


@settings(
    max_examples=int(os.environ.get("DISPATCH_TEST_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(argv=command_lines(), stdin=st.binary(max_size=40) | st.just(b'{"id": "fz", "size": {}}'))
def test_any_command_line_exits_0_1_or_2_with_at_most_one_line(
    in_env: None, argv: list[str], stdin: bytes
) -> None:
    code, err = run_main(argv, stdin)
    event(f"{argv[0] if argv and argv[0] in COMMANDS else '(none)'} exit {code}")
    if code == 0 and argv[:1] != ["doctor"]:
        assert err == "", (argv, err)
    assert_one_line(code, err, argv)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(argv=command_lines())
def test_real_processes_agree(env: dict[str, str], argv: list[str]) -> None:
    # a real exec refuses NUL itself, and a shell could not pass undecodable text as str
    argv = [a.replace("\0", "") for a in argv]
    argv = [a.encode(errors="replace").decode() for a in argv]
    done = dispatch(env, *argv)
    assert_one_line(done.returncode, done.stderr, argv)
