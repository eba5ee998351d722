"""What every route reads: the settings, one client, the shared feed and the sign-in gate,
and how a page is rendered (the templates, with who is asking)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from dispatch.cli.fleet_extras import Extras, extras
from dispatch.client import Client
from dispatch.clock import SystemClock
from dispatch.config.settings import Settings
from dispatch.config.watcher import ConfigFiles
from dispatch.fleet.view import Snapshot, snapshot
from dispatch.web import words
from dispatch.web.auth import Gate
from dispatch.web.feed import Feed, Frame

HERE = Path(__file__).parent
READ_S = 3.0  # one snapshot's bound: the page says "stale" rather than wait longer
SETTLE_S = 1.0  # asking Redis whether it is a cluster's node, while it has not answered yet


class Web:
    """What every route reads: the settings, one client, the shared feed, the gate."""

    def __init__(self, settings: Settings, client: Client, gate: Gate, every_s: float) -> None:
        self.settings = settings
        self.client = client
        self.gate = gate
        # the files as the daemon reads them: stat'ed at most once a second, parsed on change
        self.config = ConfigFiles(settings.config_dir, SystemClock())
        self.feed = Feed(self._read, every_s)
        self.templates = Jinja2Templates(env=_environment())
        self._rendered: tuple[int, str] = (0, "")

    async def _read(self) -> tuple[Snapshot, Extras]:
        await self.client.settle(SETTLE_S)  # a no-op once it knows
        snap = await snapshot(self.client.redis, self.client.prefix, READ_S)
        if snap.error:
            return snap, Extras()
        config = self.config.current()
        return snap, await extras(self.client.redis, self.settings, snap.at_ms, READ_S, config)

    def overview_html(self, frame: Frame) -> str:
        """The overview's body for `frame`, rendered once however many streams send it."""
        seq, html = self._rendered
        if seq != frame.seq:
            template = self.templates.get_template("overview_body.html")
            html = template.render(words.overview(frame, self.feed.stale_for(frame)))
            self._rendered = (frame.seq, html)
        return html

    def page(self, request: Request, name: str, code: int = 200, **context: Any) -> Response:
        context |= {
            "operator": self.gate.operator(request),
            "can_sign_in": self.gate.enabled,
            "csrf": self.gate.csrf(request),
            "path": request.url.path,
            "said": request.session.pop("said", "") if "session" in request.scope else "",
        }
        response = self.templates.TemplateResponse(request, name, context, status_code=code)
        response.headers["cache-control"] = "no-store"
        return response


def web_of(request: Request) -> Web:
    found: Web = request.app.state.web
    return found


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.globals.update(words.GLOBALS)
    return env
