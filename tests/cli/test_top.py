"""`dispatch top` driven by Textual's pilot, with no Redis: the snapshots are built here and
handed to the board one read at a time, and its keys call recording fakes. The board shows
hosts, waiting reasons, running jobs and endings; a failed read dims it and says how old it is
and why, until a read succeeds; `p` pauses or resumes by the snapshot's pause, `c` asks before
it cancels, `w` opens a job's story, `l` adds how to follow its log, `q` quits."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from dispatch.cli import main
from dispatch.cli.top import Actions, Board, Confirm, Story
from dispatch.client import CancelAnswer
from dispatch.clock import FakeClock
from dispatch.fleet.view import Ending, HostRow, QueueRow, RunningJob, Snapshot, Waiting
from tests.support.polling import eventually

pytestmark = pytest.mark.anyio

AT = 1_900_000_000_000
MIN = 60_000


def fleet(paused: str = "") -> Snapshot:
    running = [
        RunningJob("job-a", "jobs", "acme/api#7", AT - 3 * MIN),
        RunningJob("job-b", "jobs@w1", "site", AT - 90_000),
    ]
    return Snapshot(
        at_ms=AT,
        paused=paused,
        queues=[QueueRow("jobs", ready=1, delayed=4, active=2)],
        sampled=4,
        hosts=[
            HostRow(
                "w1",
                alive=True,
                last_beat_ms=AT - 2000,
                running=2,
                slots=4,
                jobs=running,
                offset_ms=-30_000,  # its clock 30 s ahead of the server's: it claimed by it
            ),
            HostRow("w2", alive=False, last_beat_ms=AT - 5 * MIN, running=0, slots=2),
        ],
        reasons={
            "scope-repo": Waiting(3, AT - 10 * MIN),
            "pause-window": Waiting(1, AT - 2 * MIN),
        },
        recent=[Ending("job-z", "jobs", "failed", "exit-nonzero", AT - MIN, "w1")],
    )


class Feed:
    """The board's fetch: each read takes the next snapshot (or raises the next error) put."""

    def __init__(self) -> None:
        self.reads: asyncio.Queue[Snapshot | Exception] = asyncio.Queue()

    async def __call__(self) -> Snapshot:
        found = await self.reads.get()
        if isinstance(found, Exception):
            raise found
        return found


class Fleet:
    """The keys' calls, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    async def pause(self) -> list[str]:
        self.calls.append(("pause",))
        return ["jobs"]

    async def resume(self) -> list[str]:
        self.calls.append(("resume",))
        return ["jobs"]

    async def cancel(self, job_id: str, wait_s: float) -> CancelAnswer:
        self.calls.append(("cancel", job_id))
        return CancelAnswer("taken", "w1")

    async def why(self, job_id: str) -> str:
        return f"Job {job_id} on queue jobs is active."

    def actions(self) -> Actions:
        return Actions(self.pause, self.resume, self.cancel, self.why)


def board(feed: Feed, calls: Fleet, clock: FakeClock | None = None) -> Board:
    return Board(feed, calls.actions(), clock or FakeClock(), every_s=0.05)


def cells(app: Board, table: str) -> list[list[str]]:
    t = app.query_one(f"#{table}", DataTable)
    return [[str(c) for c in t.get_row_at(i)] for i in range(t.row_count)]


def text(app: Board, widget: str) -> str:
    return str(app.query_one(widget, Static).content)


async def shown(app: Board, want: str, widget: str = "#headline") -> str:
    return await eventually(lambda: _has(app, widget, want))


async def _has(app: Board, widget: str, want: str) -> str | None:
    found = text(app, widget)
    return found if want in found else None


async def test_the_board_shows_hosts_reasons_running_jobs_and_endings() -> None:
    feed, calls = Feed(), Fleet()
    app = board(feed, calls)
    async with app.run_test(size=(160, 50)):
        await feed.reads.put(fleet())
        head = await shown(app, "running: 2 of 4 slots on 1 host")
        assert head == (
            "running: 2 of 4 slots on 1 host; 1 ready; 4 waiting (3 scope-repo, 1 pause-window);"
            " paused: no; gone: w2"
        )
        hosts = cells(app, "hosts")
        assert hosts[0][:3] == ["w1", "live", "██████░░░░░░ 2/4"]
        assert hosts[1][:3] == ["w2", "gone", "░░░░░░░░░░░░ 0/2"]
        assert cells(app, "waiting") == [
            ["scope-repo", "3", "10m ago"],
            ["pause-window", "1", "2m ago"],
        ]
        assert cells(app, "running") == [
            ["job-a", "jobs", "acme/api#7", "w1", "3m"],
            ["job-b", "jobs@w1", "site", "w1", "2m"],
        ]
        assert cells(app, "endings") == [
            ["job-z", "jobs", "failed", "exit-nonzero", "w1", "1m ago"]
        ]
        assert not app.query_one("#stale").display


async def test_a_failed_read_dims_the_board_and_says_how_old_and_why_until_one_succeeds() -> None:
    feed, calls, clock = Feed(), Fleet(), FakeClock()
    app = board(feed, calls, clock)
    async with app.run_test(size=(160, 50)):
        await feed.reads.put(Snapshot(error="Redis did not answer within 5 s"))
        await shown(app, "no snapshot yet: Redis did not answer within 5 s", "#stale")
        await feed.reads.put(fleet())
        await eventually(lambda: _fresh(app))
        clock.advance(4)
        await feed.reads.put(Snapshot(error="Redis did not answer within 5 s"))
        await shown(app, "stale 4 s: Redis did not answer within 5 s", "#stale")
        assert app.query_one("#board").has_class("stale")
        assert cells(app, "running")[0][0] == "job-a"  # the last good board stays, dimmed
        clock.advance(3)
        await feed.reads.put(OSError("connection refused"))
        await shown(app, "stale 7 s: OSError: connection refused", "#stale")
        await feed.reads.put(fleet())
        await eventually(lambda: _fresh(app))


async def _fresh(app: Board) -> bool:
    return not app.query_one("#stale").display and not app.query_one("#board").has_class("stale")


async def test_a_slow_read_dims_the_board_before_it_fails() -> None:
    feed, calls, clock = Feed(), Fleet(), FakeClock()
    app = board(feed, calls, clock)
    async with app.run_test(size=(160, 50)):
        await feed.reads.put(fleet())
        await shown(app, "running: 2 of 4")
        clock.advance(3)  # the next read has not come back
        await shown(app, "stale 3 s: the fleet is slow to read", "#stale")


@pytest.mark.parametrize(("paused", "called"), [("", "pause"), ("fleet", "resume")])
async def test_p_pauses_a_running_fleet_and_resumes_a_paused_one(paused, called) -> None:
    feed, calls = Feed(), Fleet()
    app = board(feed, calls)
    async with app.run_test(size=(160, 50)) as pilot:
        await feed.reads.put(fleet(paused))
        await shown(app, "running: 2 of 4")
        await pilot.press("p")
        await eventually(lambda: _calls(calls))
        assert calls.calls == [(called,)]


async def _calls(fleet: Fleet) -> list[tuple[str, ...]]:
    return fleet.calls


async def test_c_asks_first_and_cancels_the_selected_job_only_on_y_whatever_moved() -> None:
    feed, calls = Feed(), Fleet()
    app = board(feed, calls)
    async with app.run_test(size=(160, 50)) as pilot:
        await feed.reads.put(fleet())
        await shown(app, "running: 2 of 4")
        await pilot.press("down")  # the second running job
        moved = fleet()
        moved.hosts[0].jobs.insert(0, RunningJob("job-0", "jobs", "", AT))
        await feed.reads.put(moved)  # a job started before it: the selection stays on job-b
        await eventually(lambda: _rows(app, "running", 3))
        await pilot.press("c")
        assert isinstance(app.screen, Confirm) and "job-b" in app.screen.question
        await pilot.press("n")
        await pilot.pause()
        assert not isinstance(app.screen, Confirm) and calls.calls == []
        await pilot.press("c", "y")
        await eventually(lambda: _calls(calls))
        assert calls.calls == [("cancel", "job-b")]


async def _rows(app: Board, table: str, n: int) -> bool:
    return len(cells(app, table)) == n


async def test_w_and_enter_tell_the_story_l_adds_the_log_command_escape_closes() -> None:
    feed, calls = Feed(), Fleet()
    app = board(feed, calls)
    async with app.run_test(size=(160, 50)) as pilot:
        await feed.reads.put(fleet())
        await shown(app, "running: 2 of 4")
        for key in ("w", "enter"):
            await pilot.press(key)
            told = await eventually(lambda: _story(app))
            assert told == "Job job-a on queue jobs is active."
            await pilot.press("escape")
            await eventually(lambda: _board(app))
        await pilot.press("tab", "l")  # the endings table
        told = await eventually(lambda: _story(app))
        assert told.splitlines() == [
            "Job job-z on queue jobs is active.",
            "logs: run `dispatch logs job-z -f`",
        ]


async def _story(app: Board) -> str | None:
    return app.screen.text if isinstance(app.screen, Story) else None


async def _board(app: Board) -> bool:
    return app.screen is app.screen_stack[0]


async def test_q_quits() -> None:
    feed, calls = Feed(), Fleet()
    app = board(feed, calls)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running
    assert app.return_code == 0


def test_without_a_terminal_top_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("DISPATCH_REDIS_URL", "redis://127.0.0.1:9/0")  # never asked
    monkeypatch.setenv("DISPATCH_STATE_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as exited:
        main(["top"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err == "dispatch: top needs a terminal; dispatch status gives the fleet as text\n"
