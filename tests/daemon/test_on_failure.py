"""DISPATCH_ON_FAILURE on a real Redis with real commands: which endings qualify, the record on
the command's stdin, once fleet-wide however many hosts end the same run, and a command that
hangs or fails is logged, never retried."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from pathlib import Path

import pytest

from dispatch.daemon.on_failure import OnFailure, Webhook, qualifies
from dispatch.model import RunRecord
from dispatch.reasons import CANCELLED, COMPLETED, FAILED, INFRA, POLICY
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio


def record(outcome: str, **fields: object) -> RunRecord:
    base: dict[str, object] = {
        "id": "j1", "attempt": 2, "host": "h1", "queue": "jobs", "claim": "h1:7",
        "outcome": outcome, "reason": "exit-3",
    }  # fmt: skip
    return RunRecord(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("action", "found", "fires"),
    [
        ("finish", record(FAILED), True),
        ("finish", record(INFRA), True),  # finished, not retried: no attempt left
        ("retry", record(INFRA), False),
        ("finish", record(POLICY, budget_reserved=True), True),
        ("finish", record(POLICY), False),
        ("finish", record(COMPLETED), False),
        ("finish", record(CANCELLED), False),
        ("defer", record(INFRA), False),
        ("finish", None, False),
    ],
)
def test_which_endings_qualify(action: str, found: RunRecord | None, fires: bool) -> None:
    assert qualifies(action, found) is fires


def hook(tmp_path: Path, body: str = "") -> tuple[str, ...]:
    script = tmp_path / "hook.sh"
    out = tmp_path / "told"
    out.mkdir(exist_ok=True)
    script.write_text(f'#!/bin/sh\ncat > "{out}/$$.json"\n{body}\n')
    script.chmod(0o755)
    return (str(script),)


async def test_two_hosts_ending_one_run_tell_the_operator_once(redis, prefix, tmp_path) -> None:
    argv = hook(tmp_path)
    first = OnFailure(redis, prefix, "h1", argv, 5.0)
    second = OnFailure(redis, prefix, "h2", argv, 5.0)  # it settled the same run's record
    assert await first.fire(record(FAILED)) == ["command"]
    assert await second.fire(record(FAILED)) == []
    [told] = list((tmp_path / "told").iterdir())
    said = json.loads(told.read_text())  # the run record, as the mirror keeps it
    assert (said["id"], said["attempt"], said["claim"]) == ("j1", 2, "h1:7")
    assert (said["outcome"], said["reason"]) == (FAILED, "exit-3")
    assert await first.fire(record(FAILED, attempt=3, claim="h1:9")) == ["command"]  # another


async def test_a_command_that_hangs_or_fails_is_logged(redis, prefix, tmp_path, logged) -> None:
    slow = OnFailure(redis, prefix, "h1", hook(tmp_path, "sleep 30"), 0.3)
    assert await slow.fire(record(FAILED)) == ["command"]
    failing = OnFailure(redis, prefix, "h1", hook(tmp_path, "exit 4"), 5.0)
    failing.ended("finish", record(INFRA, claim="h1:8"))  # in a task of its own
    await failing.settle()

    async def both() -> list[str] | None:
        lines = [json.loads(x) for x in logged.getvalue().splitlines() if x.startswith("{")]
        errors = [x["error"] for x in lines if x.get("event") == "on_failure_failed"]
        return errors if len(errors) == 2 else None

    assert await eventually(both, timeout=5) == ["timed out after 0.3 s", "exit 4"]


class Receiver:
    """A local HTTP endpoint: answers each POST with the next status of `statuses`."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.posts: list[tuple[dict[str, str], bytes]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        headers = dict(line.split(": ", 1) for line in head.split("\r\n")[1:] if ": " in line)
        headers = {k.lower(): v for k, v in headers.items()}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        self.posts.append((headers, body))
        status = self.statuses.pop(0) if self.statuses else 200
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        writer.close()


async def serving(receiver: Receiver) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(receiver.handle, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook"


async def test_the_webhook_is_signed_retried_and_sent_once_fleet_wide(redis, prefix) -> None:
    receiver = Receiver(500, 503)
    server, url = await serving(receiver)
    try:
        hook = Webhook(url, "s3cret", backoff_s=(0.0, 0.0, 0.0))
        first = OnFailure(redis, prefix, "h1", webhook=hook)
        second = OnFailure(redis, prefix, "h2", webhook=hook)
        assert await first.fire(record(FAILED)) == ["webhook"]
        assert await second.fire(record(FAILED)) == []
    finally:
        server.close()
    assert len(receiver.posts) == 3  # two refused, the third taken, and no more
    headers, body = receiver.posts[-1]
    mac = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert headers["x-dispatch-signature"] == f"sha256={mac}"
    assert json.loads(body)["claim"] == "h1:7"


async def test_a_webhook_that_never_takes_it_is_dropped_after_four_tries(
    redis, prefix, logged
) -> None:
    receiver = Receiver(500, 500, 500, 500, 500)
    server, url = await serving(receiver)
    try:
        hook = Webhook(url, backoff_s=(0.0, 0.0, 0.0))
        await OnFailure(redis, prefix, "h1", webhook=hook).fire(record(FAILED))
    finally:
        server.close()
    assert len(receiver.posts) == 4 and "x-dispatch-signature" not in receiver.posts[0][0]
    rows = [json.loads(x) for x in logged.getvalue().splitlines() if x.startswith("{")]
    [dropped] = [r for r in rows if r.get("event") == "webhook_dropped"]
    assert dropped["error"] == "HTTP 500" and dropped["tries"] == 4
