"""What a signed-in operator may change: cancel a job, pause or resume the fleet or a queue,
pause, resume or run a trigger now. Each is a POST that needs the session and its CSRF token
(auth.py: 403 otherwise, nothing written); the first POST answers with a confirm page that
says what will happen, and only the confirm page's own POST (`confirmed=1`) acts. Each action
is logged with what it did and to what, never with the token.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import quote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from dispatch.cli.triggers import configured
from dispatch.cli.views import cancel_line
from dispatch.errors import ConfigError, NotFound
from dispatch.log import event
from dispatch.triggers import control
from dispatch.triggers.store import TriggerStore
from dispatch.web.site import Web, web_of

CANCEL_WAIT_S = 10.0


@dataclass(frozen=True)
class Act:
    question: str  # what the confirm page asks
    run: Callable[[], Awaitable[str]]  # does it; says what was done
    back: str  # where to go after


async def act(request: Request) -> Response:
    web = web_of(request)
    form = await web.gate.require(request)
    what = str(request.path_params["what"])
    target = str(form.get("target") or "")
    found = await _act(web, what, target)
    if form.get("confirmed") != "1":
        fields = {"target": target, "confirmed": "1"}
        return web.page(
            request, "confirm.html", act=found, action=request.url.path, fields=fields,
            title="Confirm",
        )  # fmt: skip
    said = await found.run()
    web.feed.expire()  # the page it returns to shows what was done, not the second before
    event("web_action", action=what, target=target, said=said)
    request.session["said"] = said[:300]  # shown once, by the page it returns to
    return RedirectResponse(found.back, 303)


async def _act(web: Web, what: str, target: str) -> Act:
    c = web.client
    if what == "cancel":
        _need(target, "a job id")

        async def cancel() -> str:
            answer = await c.cancel(target, CANCEL_WAIT_S)
            return cancel_line(target, answer)[0]

        question = f"Cancel job {target}? A running job is stopped."
        return Act(question, cancel, f"/jobs/{quote(target, safe='')}")
    if what in ("pause", "resume"):
        return await _pause(web, what, target)
    if what.startswith("trigger-"):
        return _trigger(web, what.removeprefix("trigger-"), target)
    raise HTTPException(404, f"no action {what[:40]!r}")


async def _pause(web: Web, what: str, queue: str) -> Act:
    c = web.client
    if not queue:

        async def fleet() -> str:
            names = await (c.pause() if what == "pause" else c.resume())
            return f"{what}d the fleet ({len(names)} queues)"

        question = (
            "Pause the whole fleet? No queue starts a job until it is resumed."
            if what == "pause"
            else "Resume the fleet? Every queue's own pause is lifted too."
        )
        return Act(question, fleet, "/")

    async def one() -> str:
        if what == "resume" and (await c.pause_state()).fleet is not None:
            raise HTTPException(409, "the whole fleet is paused: resume the fleet instead")
        queue_ = c.queue(queue)
        await (queue_.pause() if what == "pause" else queue_.resume())
        return f"{what}d queue {queue}"

    if queue not in await c.queues():
        raise NotFound(f"no queue {queue[:60]!r}")
    return Act(f"{what.capitalize()} queue {queue}?", one, "/")


def _trigger(web: Web, what: str, tid: str) -> Act:
    if what not in ("pause", "resume", "run"):
        raise HTTPException(404, f"no trigger action {what[:40]!r}")
    try:
        found = next((t for t in configured(web.settings)[0] if t.id == tid), None)
    except ConfigError as exc:
        raise HTTPException(409, str(exc).splitlines()[0]) from None
    if found is None:
        raise NotFound(f"no trigger {tid[:60]!r}")
    store = TriggerStore(web.client.redis, web.client.prefix)
    now = web.client.clock.now_ms

    async def go() -> str:
        if what == "run":
            return f"trigger {tid} minted job {await control.run_now(store, found, now())}"
        if what == "pause":
            n = await control.pause(store, tid, now(), web.settings.host)
            return f"paused trigger {tid} ({n} pending occurrence(s) withdrawn)"
        await control.resume(store, tid, now())
        return f"resumed trigger {tid}"

    question = {
        "run": f"Run trigger {tid} now? One job is minted at once.",
        "pause": f"Pause trigger {tid} fleet-wide? Its pending occurrences are withdrawn.",
        "resume": f"Resume trigger {tid}?",
    }[what]
    return Act(question, go, "/triggers")


def _need(value: str, what: str) -> None:
    if not value or len(value) > 200 or not value.isprintable():
        raise HTTPException(400, f"this action needs {what}")


def routes() -> list[Route]:
    return [Route("/act/{what}", act, methods=["POST"])]
