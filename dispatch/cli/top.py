"""`dispatch top`: a live board of the fleet in the terminal, on Textual.

A timer starts a read of the fleet snapshot (dispatch/fleet/view.py) every second in a worker,
unless one is still under way, so the screen never waits on Redis; a read that fails or is
slow dims the board and says how old it is and why (dispatch/cli/top_rows.py). Where the
snapshot comes from (`Fetch`) and what the keys do (`Actions`) are handed in: `run` gives the
client's, a test gives its own and drives the board with no Redis.

    p  pause or resume the fleet      c  cancel the selected job (asks y/n)
    w, enter  the selected job's story (escape closes)   l  follow its log   q  quit
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

from redis.exceptions import RedisError
from textual import work
from textual.app import App, ComposeResult, SuspendNotSupported
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Label, Static

from dispatch.cli import fleet_views, top_rows
from dispatch.cli import views as view
from dispatch.cli.inputs import UsageError
from dispatch.cli.story import story
from dispatch.cli.top_rows import JOB_TABLES, Row
from dispatch.client import CancelAnswer, Client
from dispatch.clock import Clock, SystemClock
from dispatch.errors import DispatchError
from dispatch.fleet.view import Snapshot, snapshot
from dispatch.model import one_line

Fetch = Callable[[], Awaitable[Snapshot]]
CANCEL_WAIT_S = 10.0  # as `dispatch cancel`: how long the owning host has to take it
TITLES = {"hosts": "HOSTS", "waiting": "WAITING", "running": "RUNNING", "endings": "ENDINGS"}


@dataclass(frozen=True)
class Actions:
    """What the keys do to the fleet: the client's calls, or a test's."""

    pause: Callable[[], Awaitable[list[str]]]
    resume: Callable[[], Awaitable[list[str]]]
    cancel: Callable[[str, float], Awaitable[CancelAnswer]]
    why: Callable[[str], Awaitable[str]]  # the job's story, as `dispatch why` tells it
    # follows a job's log in the terminal, the board suspended, until it ends or ^C
    follow: Callable[[str], None] | None = None


async def run(client: Client) -> int:
    """`dispatch top` on the client's fleet, until `q`; without a terminal, a usage error
    (a pipe or a script would wait forever on a board nobody sees)."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("top needs a terminal; dispatch status gives the fleet as text")
    actions = Actions(client.pause, client.resume, client.cancel, partial(story, client), follow)
    await Board(partial(snapshot, client.redis, client.prefix), actions).run_async()
    return 0


def follow(job_id: str) -> None:
    """`dispatch logs -f ID` in the foreground, then a key to come back: ^C ends the follow,
    not the board (the board's process shrugs it off meanwhile; a handler, not SIG_IGN, which
    the child would inherit)."""
    before = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        code = subprocess.call([sys.executable, "-m", "dispatch", "logs", "-f", job_id])
        input(f"-- dispatch logs ended (exit {code}); Enter for the board --")
    except EOFError:
        pass
    finally:
        signal.signal(signal.SIGINT, before)


class Board(App[None]):
    TITLE = "dispatch top"
    ENABLE_COMMAND_PALETTE = False
    AUTO_FOCUS = "#running"
    CSS = """
    #stale { display: none; background: $warning; color: $text; padding: 0 1; }
    #board.stale { opacity: 50%; }
    #headline { padding: 0 1; }
    .title { padding: 1 1 0 1; text-style: bold; }
    DataTable { height: auto; max-height: 12; }
    #running, #endings { height: 1fr; max-height: 100%; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "pause", "pause/resume"),
        Binding("c", "cancel", "cancel job"),
        Binding("w", "why", "why"),
        Binding("l", "follow_log", "log"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(
        self, fetch: Fetch, actions: Actions, clock: Clock | None = None, every_s: float = 1.0
    ) -> None:
        super().__init__()
        self.fetch = fetch
        self.actions = actions
        self.clock = clock or SystemClock()
        self.every_s = every_s
        self.shown = Snapshot()  # the last good snapshot: what the board shows
        self._good_s: float | None = None  # clock.monotonic() when it came
        self._error = ""  # the last read's, "" once one succeeds
        self._reading = False
        self._rows: dict[str, list[Row]] = {}

    def compose(self) -> ComposeResult:
        # kept, not queried: a query asks the screen on top, which may be a story
        self._stale = Static(id="stale", markup=False)
        self._headline = Static("reading the fleet...", id="headline", markup=False)
        self._tables = {name: DataTable[str](id=name, cursor_type="row") for name in TITLES}
        yield self._stale
        with Vertical(id="board") as self._board:
            yield self._headline
            for name, title in TITLES.items():
                yield Label(title, classes="title")
                yield self._tables[name]
        yield Footer()

    def on_mount(self) -> None:
        for name, header in top_rows.HEADERS.items():
            self._tables[name].add_columns(*header)
            self._tables[name].can_focus = name in JOB_TABLES
        self._tick()
        self.set_interval(self.every_s, self._tick)

    # -- the read ------------------------------------------------------------------------------

    def _tick(self) -> None:
        if not self._reading:
            self._reading = True
            self._read()
        self._show_staleness()

    @work(group="read")
    async def _read(self) -> None:
        try:
            found = await self.fetch()
        except Exception as exc:  # the board outlives any one read: it says why, reads again
            found = Snapshot(error=one_line(f"{type(exc).__name__}: {exc}"))
        finally:
            self._reading = False
        self._error = found.error
        if not found.error:
            self._good_s, self.shown = self.clock.monotonic(), found
            self._draw(found)
        self._show_staleness()

    def _draw(self, s: Snapshot) -> None:
        self._headline.update(fleet_views.headline(s))
        for name, found in top_rows.rows(s).items():
            self._fill(name, found)

    def _fill(self, name: str, found: list[Row]) -> None:
        """The table's rows, the cursor kept on the same key if it is still there."""
        if found == self._rows.get(name):
            return
        table = self._tables[name]
        kept = self._key_at(name, table.cursor_row)
        table.clear()
        for _, cells in found:
            table.add_row(*cells)
        self._rows[name] = found
        keys = [key for key, _ in found]
        if kept in keys:
            table.move_cursor(row=keys.index(kept))

    def _show_staleness(self) -> None:
        line = top_rows.stale_line(self._good_s, self.clock.monotonic(), self._error)
        self._stale.update(line)
        self._stale.display = bool(line)
        self._board.set_class(bool(line), "stale")

    # -- the keys ------------------------------------------------------------------------------

    def action_pause(self) -> None:
        if self._good_s is None:  # a toggle needs to know which way the fleet stands
            self.notify("the fleet is not read yet", severity="warning")
            return
        self._act(self._toggle_pause)

    async def _toggle_pause(self) -> str:
        if self.shown.paused:  # the fleet's pause or some queues' own: resume lifts both
            return view.pause_line("resume", await self.actions.resume())
        return view.pause_line("pause", await self.actions.pause())

    def action_cancel(self) -> None:
        job_id = self._selected()
        if job_id is None:
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._act(partial(self._cancel, job_id))

        self.push_screen(Confirm(f"Cancel job {job_id}? y / n"), answered)

    async def _cancel(self, job_id: str) -> str:
        self.notify(f"cancelling {job_id}...")
        return view.cancel_line(job_id, await self.actions.cancel(job_id, CANCEL_WAIT_S))[0]

    def action_why(self) -> None:
        if job_id := self._selected():
            self._story(job_id)

    def action_follow_log(self) -> None:
        """Follow the selected job's log in the terminal (`dispatch logs -f`), the board
        suspended until it ends or ^C; where the terminal cannot be handed over (a test's
        headless board), the story and the command that follows it."""
        job_id = self._selected()
        if not job_id:
            return
        if self.actions.follow is not None:
            try:
                with self.suspend():
                    self.actions.follow(job_id)
                return
            except SuspendNotSupported:
                pass
        self._story(job_id, f"logs: run `dispatch logs {job_id} -f`")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id in JOB_TABLES:  # enter on a job
            self.action_why()

    @work(group="story")
    async def _story(self, job_id: str, *more: str) -> None:
        try:
            told = await self.actions.why(job_id)
        except (DispatchError, RedisError, OSError) as exc:
            self.notify(one_line(str(exc)), severity="error")
            return
        self.push_screen(Story("\n".join([told, *more])))

    @work(group="act")
    async def _act(self, doing: Callable[[], Awaitable[str]]) -> None:
        try:
            self.notify(await doing())
        except (DispatchError, RedisError, OSError) as exc:
            self.notify(one_line(str(exc)), severity="error")

    # -- the selection -------------------------------------------------------------------------

    def _selected(self) -> str | None:
        """The job under the cursor of the focused job table (the running one by default)."""
        focused = self.focused
        name = focused.id if focused is not None and focused.id in JOB_TABLES else "running"
        key = self._key_at(name, self._tables[name].cursor_row)
        if key is None:
            self.notify("no job selected: tab to a running job or an ending", severity="warning")
        return key

    def _key_at(self, name: str, index: int) -> str | None:
        found = self._rows.get(name, [])
        return found[index][0] if 0 <= index < len(found) else None


class Confirm(ModalScreen[bool]):
    """A question answered y or n (escape: n)."""

    DEFAULT_CSS = "Confirm { align: center middle; } #question { width: auto; padding: 1 2; }"
    BINDINGS: ClassVar[list[BindingType]] = [
        ("y", "answer(True)", "yes"),
        ("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        yield Static(self.question, id="question", markup=False)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class Story(ModalScreen[None]):
    """A job's story, over the board until escape."""

    DEFAULT_CSS = "#story { margin: 2 4; padding: 1 2; background: $surface; }"
    BINDINGS: ClassVar[list[BindingType]] = [("escape", "dismiss", "close")]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="story"):
            yield Static(self.text, markup=False)
        yield Footer()
