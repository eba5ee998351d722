"""The hiredis packer sends the very bytes redis-py's own packer sends, over every URL kind."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import DataError

from dispatch.queue.connect import (
    FastConnection,
    FastSSLConnection,
    FastUnixDomainSocketConnection,
    redis_client,
)
from tests.support.polling import eventually_sync

COMMANDS: list[tuple[Any, ...]] = [
    ("SET", "key", "value"),
    ("SET", b"key", b"value"),
    ("CONFIG GET", "maxmemory"),
    (b"CONFIG GET", b"maxmemory"),
    ("CLIENT SETNAME", "dispatch"),
    ("ZADD", "z", 0, "w", -7, b"x", 2**70, "big"),
    ("ZADD", "z", 1.5, "a", 0.1, "b", -2.25e-7, "c", 1e300, "d", float("inf"), "e"),
    ("HSET", "h", "ünïcödé ✓", "日本語", "emoji", "\U0001f680"),
    ("SET", "", b""),
    ("EVALSHA", "0" * 40, 2, "k1", "k2", "", b"", 0, "with space", b"\x00\xff\r\n"),
    ("SET", "large", b"x" * 20_000),  # past redis-py's chunking cutoff
    ("SET", "large", "y" * 7_000, "z" * 7_000),
    ("SET", "view", memoryview(b"from a view")),
]


def _joined(chunks: list[bytes]) -> bytes:
    return b"".join(bytes(c) for c in chunks)


@pytest.mark.parametrize("args", COMMANDS, ids=range(len(COMMANDS)))
def test_pack_command_matches_stock(args: tuple[Any, ...]) -> None:
    assert _joined(FastConnection().pack_command(*args)) == _joined(
        Connection().pack_command(*args)
    )


def test_pack_commands_matches_stock() -> None:
    assert _joined(FastConnection().pack_commands(COMMANDS)) == _joined(
        Connection().pack_commands(COMMANDS)
    )


def test_pack_command_uses_the_connection_encoding() -> None:
    args = ("SET", "k", "café")
    stock = Connection(encoding="latin-1")
    fast = FastConnection(encoding="latin-1")
    assert _joined(fast.pack_command(*args)) == _joined(stock.pack_command(*args))
    assert b"caf\xe9" in _joined(fast.pack_command(*args))


@pytest.mark.parametrize(
    ("url", "stock", "fast"),
    [
        ("redis://localhost:6379/0", Connection, FastConnection),
        ("rediss://localhost:6380/0", SSLConnection, FastSSLConnection),
        ("unix:///tmp/redis.sock", UnixDomainSocketConnection, FastUnixDomainSocketConnection),
    ],
)
def test_every_url_kind_gets_its_fast_twin(url: str, stock: type, fast: type) -> None:
    client = redis_client(url, socket_timeout=1)
    assert client.connection_pool.connection_class is fast
    assert issubclass(fast, stock)


async def _round_trip(url: str, prefix: str) -> None:
    client = redis_client(url, socket_timeout=5)
    try:
        values: list[Any] = ["", b"", "ünïcödé ✓", b"\x00\xff\r\n", 42, -1.5, "a b c"]
        for i, value in enumerate(values):
            await client.set(f"{prefix}:{i}", value, ex=60)
        got = [await client.get(f"{prefix}:{i}") for i in range(len(values))]
        assert got == [
            b"",
            b"",
            "ünïcödé ✓".encode(),
            b"\x00\xff\r\n",
            b"42",
            b"-1.5",
            b"a b c",
        ]
        async with client.pipeline(transaction=False) as pipe:
            pipe.set(f"{prefix}:big", b"x" * 100_000, ex=60)
            pipe.strlen(f"{prefix}:big")
            assert await pipe.execute() == [True, 100_000]
        assert "maxmemory" in await client.execute_command("CONFIG GET", "maxmemory")
    finally:
        await client.aclose()


@pytest.mark.anyio
async def test_round_trip_over_tcp(redis_url: str, prefix: str) -> None:
    await _round_trip(redis_url, prefix)


@pytest.fixture
def unix_url() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed; run the README's test command")
    with tempfile.TemporaryDirectory() as workdir:
        sock = Path(workdir) / "redis.sock"
        proc = subprocess.Popen(
            [binary, "--port", "0", "--unixsocket", str(sock), "--save", "", "--dir", workdir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            eventually_sync(sock.exists, timeout=10.0, every=0.02)
            yield f"unix://{sock}"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.mark.anyio
async def test_round_trip_over_unix_socket(unix_url: str, prefix: str) -> None:
    await _round_trip(unix_url, prefix)


@pytest.mark.parametrize("bad", [None, True, object()])
def test_a_value_the_encoder_refuses_is_refused_as_stock_refuses_it(bad: Any) -> None:
    with pytest.raises(DataError) as stock:
        Connection().pack_command("SET", "k", bad)
    with pytest.raises(DataError) as fast:
        FastConnection().pack_command("SET", "k", bad)
    assert str(fast.value) == str(stock.value)


_ARG = st.one_of(st.text(), st.binary(), st.integers(), st.floats())


@given(st.lists(_ARG, max_size=12))
def test_any_str_bytes_int_or_float_packs_as_stock_packs_it(args: list[Any]) -> None:
    command = ("EVALSHA", *args)
    assert _joined(FastConnection().pack_command(*command)) == _joined(
        Connection().pack_command(*command)
    )
