"""The pages anyone may read: the overview (live), jobs, a job, hosts, triggers, spend, runs,
and the sign-in form. Each reads Redis through the one client; the overview and the hosts
page read the shared feed, so they cost one snapshot a second however many are open."""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from dispatch.cli.story import told
from dispatch.errors import NotFound
from dispatch.log import event, scrub
from dispatch.queue import keys
from dispatch.web import listing, run_history, spend_history
from dispatch.web.auth import TooManyTries
from dispatch.web.feed import changes
from dispatch.web.site import web_of
from dispatch.web.tails import follow

_ID = 200  # characters of a job id a route takes at most


async def overview(request: Request) -> Response:
    web = web_of(request)
    frame = await web.feed.latest()
    body = web.overview_html(frame)
    return web.page(request, "overview.html", body=body, queues=frame.snap.queues, title="Overview")


async def events(request: Request) -> Response:
    web = web_of(request)
    stream = changes(web.feed, web.overview_html)
    headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


async def hosts(request: Request) -> Response:
    web = web_of(request)
    frame = await web.feed.latest()
    return web.page(request, "hosts.html", s=frame.snap, stale=frame.stale, title="Hosts")


async def jobs(request: Request) -> Response:
    web = web_of(request)
    q = listing.Query.parse(request.query_params)
    found = await listing.page(web.client, q)
    return web.page(request, "jobs.html", q=q, found=found, title="Jobs")


async def job(request: Request) -> Response:
    web = web_of(request)
    job_id = _job_id(request)
    view, runs, story = await told(web.client, job_id, last=20)
    k = keys.queue_keys(view.queue, web.client.prefix)
    document = await web.client.redis.hget(k.data, view.id)
    return web.page(
        request,
        "job.html",
        job=view,
        story=story,
        document=_document(document),
        runs=runs,
        title=f"Job {view.id}",
    )


async def job_output(request: Request) -> Response:
    """The job's output as events: what its tail holds, then what comes, until it ends."""
    web = web_of(request)
    job_id = _job_id(request)
    view = await web.client.get(job_id)
    if view is None:
        raise NotFound(f"no job {job_id}")
    stream = follow(web.client, view)
    headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


async def triggers(request: Request) -> Response:
    web = web_of(request)
    frame = await web.feed.latest()
    x = frame.extras
    return web.page(request, "triggers.html", x=x, stale=frame.stale, title="Triggers")


async def spend(request: Request) -> Response:
    web = web_of(request)
    frame = await web.feed.latest()
    charts = await spend_history.spend(web.client, web.config.current())
    return web.page(request, "spend.html", charts=charts, x=frame.extras, title="Spend")


async def runs(request: Request) -> Response:
    web = web_of(request)
    span = run_history.Span.parse(request.query_params.get("span", "1h"))
    found = await run_history.runs(web.client, span)
    return web.page(request, "runs.html", found=found, span=span, title="Runs")


async def signin_form(request: Request) -> Response:
    web = web_of(request)
    return web.page(request, "signin.html", refused="", title="Sign in")


async def signin(request: Request) -> Response:
    web = web_of(request)
    form = await request.form()
    offered = form.get("token")
    try:
        good = isinstance(offered, str) and web.gate.check(offered)
    except TooManyTries:
        event("web_signin_refused", why="too many failed tries")
        return web.page(
            request,
            "signin.html",
            429,
            refused="too many failed tries: wait a minute",
            title="Sign in",
        )
    if not good:
        event("web_signin_failed", client=_peer(request))
        refused = "that is not the token" if web.gate.enabled else "no token is set: read-only"
        return web.page(request, "signin.html", 403, refused=refused, title="Sign in")
    web.gate.sign_in(request)
    event("web_signed_in", client=_peer(request))
    return RedirectResponse("/", status_code=303)


async def signout(request: Request) -> Response:
    await web_of(request).gate.require(request)  # like any change: this page's own form
    request.session.clear()
    return RedirectResponse("/", status_code=303)


def _job_id(request: Request) -> str:
    job_id = str(request.path_params["job_id"])
    if len(job_id) > _ID or not job_id.isprintable():
        raise NotFound("no such job: an id is printable and at most 200 characters")
    return job_id


def _document(raw: bytes | str | None) -> str:
    """The stored document, pretty and scrubbed of credential shapes (secrets are references
    there already: `{"secret": "name"}`, never a value)."""
    if raw is None:
        return ""
    if isinstance(raw, str):
        raw = raw.encode()
    try:
        pretty = msgspec.json.format(raw, indent=2).decode(errors="replace")
    except msgspec.DecodeError:
        pretty = raw.decode(errors="replace")
    return scrub(pretty)


def _peer(request: Request) -> str:
    return request.client.host if request.client else ""


def routes() -> list[Route]:
    return [
        Route("/", overview),
        Route("/events", events),
        Route("/hosts", hosts),
        Route("/jobs", jobs),
        Route("/jobs/{job_id}/output", job_output),
        Route("/jobs/{job_id}", job),
        Route("/triggers", triggers),
        Route("/spend", spend),
        Route("/runs", runs),
        Route("/signin", signin_form, methods=["GET"]),
        Route("/signin", signin, methods=["POST"]),
        Route("/signout", signout, methods=["POST"]),
    ]
