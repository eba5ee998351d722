"""The web page's routes through its ASGI app, against a real Redis holding a fleet's worth of
keys: hosts beating (one gone), jobs waiting for several reasons, ready and running jobs, a
trigger. What anyone may read, what only a signed-in operator may change (and that a forged
POST changes nothing), and that every value from Redis is shown as text."""

from __future__ import annotations

import json
import re

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as settings_
from hypothesis import strategies as st
from redis.asyncio import Redis

from dispatch.client import Client
from dispatch.config.settings import Settings
from dispatch.model import DeferRecord, Job, SecretRef, encode_job
from dispatch.queue import keys
from dispatch.queue.transitions import Finish, NewJob, Queue
from dispatch.web import listing
from tests.web.conftest import TOKEN, csrf_of, signed_in

pytestmark = pytest.mark.anyio
EVIL = "<script>window.__pwned=1</script>"


def deferral(reason: str) -> DeferRecord:
    return DeferRecord(reason=reason, until="", at="")


async def fleet(redis: Redis, prefix: str) -> None:
    """Two deferred for scope-repo, one for pause-window, one ready; a live host running a job
    whose target carries a script, and a host gone quiet."""
    q = Queue(redis, "jobs", prefix)
    reasons = ["scope-repo", "scope-repo", "pause-window"]
    await q.enqueue([NewJob(f"d{i}", encode_job(Job(id=f"d{i}", command=["x"]))) for i in range(3)])
    batch = await q.claim(3, "h1", 60_000)
    ends = [
        Finish("defer", c.id, c.token, msgspec.json.encode(deferral(r)), 60_000)
        for c, r in zip(sorted(batch.claims, key=lambda c: c.id), reasons, strict=True)
    ]
    assert all(await q.finish(ends))
    await q.enqueue([NewJob("ready", encode_job(Job(id="ready", command=["x"])))])
    seconds, _ = await redis.time()
    now = int(seconds) * 1000
    await redis.sadd(keys.hosts_registry(prefix), "alpha", "quiet")
    await redis.hset(keys.hosts_seen(prefix), mapping={"alpha": now, "quiet": now - 90_000})
    running = [{"id": "r1", "queue": "jobs", "target": EVIL, "since_ms": now - 5_000}]
    beat = {"host": "alpha", "running": 1, "slots": 4, "version": "0.1.0", "jobs": running}
    await redis.set(keys.host_alive("alpha", prefix), json.dumps(beat), px=60_000)


async def test_the_overview_shows_the_fleet_in_words_and_escapes_what_redis_holds(
    http: httpx.AsyncClient, redis: Redis, prefix: str
) -> None:
    await fleet(redis, prefix)
    page = await http.get("/")
    assert page.status_code == 200
    html = page.text
    assert "running: 1 of 4 slots on 1 host" in html and "gone: quiet" in html
    assert '<a href="/jobs?state=delayed&amp;reason=scope-repo">scope-repo</a>' in html
    assert EVIL not in html and "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    assert "/act/" not in html  # read-only: no form that would change anything
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert page.headers["x-frame-options"] == "DENY"


async def test_every_action_is_refused_without_a_session_and_nothing_changes(
    http: httpx.AsyncClient, client: Client, redis: Redis, prefix: str
) -> None:
    await fleet(redis, prefix)
    for what in ("pause", "resume", "cancel", "trigger-run", "nothing"):
        for csrf in ("x", ""):  # "" is what a session without a CSRF token would hold
            answer = await http.post(
                f"/act/{what}", data={"target": "ready", "confirmed": "1", "csrf": csrf}
            )
            assert answer.status_code == 403, what
            assert "read-only" in answer.text
    assert (await client.pause_state()).fleet is None
    ready = await client.get("ready")
    assert ready is not None and ready.state == "waiting"


async def test_a_signed_in_pause_asks_first_needs_the_csrf_token_and_is_logged(
    http: httpx.AsyncClient, client: Client, logged
) -> None:
    csrf = await signed_in(http)
    forged = await http.post("/act/pause", data={"csrf": "not-it", "confirmed": "1"})
    assert forged.status_code == 403 and (await client.pause_state()).fleet is None
    asked = await http.post("/act/pause", data={"csrf": csrf})
    assert asked.status_code == 200 and "Pause the whole fleet?" in asked.text
    assert (await client.pause_state()).fleet is None  # the confirm page changed nothing
    done = await http.post("/act/pause", data={"csrf": csrf_of(asked.text), "confirmed": "1"})
    assert done.status_code == 303 and done.headers["location"] == "/"
    assert (await client.pause_state()).fleet is not None
    back = (await http.get("/")).text
    assert "the whole fleet is paused from web-test" in back and "paused the fleet" in back
    assert "paused the fleet" not in (await http.get("/")).text  # said once
    lines = [json.loads(line) for line in logged.getvalue().splitlines()]
    acted = [line for line in lines if line["event"] == "web_action"]
    assert [line["action"] for line in acted] == ["pause"]
    assert TOKEN not in logged.getvalue() and csrf not in logged.getvalue()


async def test_a_queue_is_not_resumed_under_a_fleet_pause(
    http: httpx.AsyncClient, client: Client, redis: Redis, prefix: str
) -> None:
    await fleet(redis, prefix)
    csrf = await signed_in(http)
    await client.pause()
    answer = await http.post("/act/resume", data={"csrf": csrf, "target": "jobs", "confirmed": "1"})
    assert answer.status_code == 409 and "resume the fleet" in answer.text
    assert await redis.exists(keys.queue_keys("jobs", prefix).paused)
    unknown = await http.post("/act/pause", data={"csrf": csrf, "target": "nope"})
    assert unknown.status_code == 404


async def test_a_signed_in_cancel_ends_a_waiting_job(
    http: httpx.AsyncClient, client: Client, redis: Redis, prefix: str
) -> None:
    await fleet(redis, prefix)
    csrf = await signed_in(http)
    page = await http.get("/jobs/ready")
    assert 'action="/act/cancel"' in page.text
    done = await http.post("/act/cancel", data={"csrf": csrf, "target": "ready", "confirmed": "1"})
    assert done.status_code == 303 and done.headers["location"] == "/jobs/ready"
    ended = await client.get("ready")
    assert ended is not None and ended.state == "cancelled"


async def test_sign_in_is_refused_with_a_wrong_token_and_limited_per_minute(
    http: httpx.AsyncClient,
) -> None:
    for _ in range(5):
        wrong = await http.post("/signin", data={"token": "guess"})
        assert wrong.status_code == 403 and "dispatch_session" not in wrong.headers.get(
            "set-cookie", ""
        )
    limited = await http.post("/signin", data={"token": TOKEN})
    assert limited.status_code == 429  # even the right one, until the minute has passed


async def test_the_session_cookie_is_httponly_strict_and_secure_over_tls(
    settings: Settings, client: Client
) -> None:
    from dispatch.web.app import build

    for tls, secure in ((False, False), (True, True)):
        app = build(settings, client, tls=tls)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://test") as http:
            answer = await http.post("/signin", data={"token": TOKEN})
        cookie = answer.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert ("secure" in cookie.split("; ")) is secure


async def test_without_a_token_nobody_signs_in(settings: Settings, client: Client) -> None:
    from dataclasses import replace

    from dispatch.web.app import build

    app = build(replace(settings, web_token=""), client)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        assert (await http.post("/signin", data={"token": ""})).status_code == 403
        assert (await http.post("/act/pause", data={"confirmed": "1"})).status_code == 403
        assert "sign in" not in (await http.get("/")).text.split("<main>")[0]


async def test_jobs_page_through_every_job_by_redis_ranges(
    http: httpx.AsyncClient, redis: Redis, prefix: str
) -> None:
    q = Queue(redis, "jobs", prefix)
    await q.enqueue(
        [NewJob(f"w{i:03d}", encode_job(Job(id=f"w{i:03d}", command=["x"]))) for i in range(120)]
    )
    seen: list[str] = []
    url = "/jobs"
    while url:
        page = await http.get(url)
        assert page.status_code == 200
        seen += re.findall(r'<a href="/jobs/(w\d+)">', page.text)
        more = re.search(r'id="next" href="([^"]+)"', page.text)
        url = more[1].replace("&amp;", "&") if more else ""
    assert sorted(seen) == [f"w{i:03d}" for i in range(120)] and len(seen) == 120
    narrowed = await http.get("/jobs?id=w11&state=waiting")
    assert re.findall(r'<a href="/jobs/(w\d+)">', narrowed.text) == [f"w11{i}" for i in range(10)]


async def test_jobs_filters_by_reason_and_target(
    http: httpx.AsyncClient, redis: Redis, prefix: str
) -> None:
    await fleet(redis, prefix)
    page = await http.get("/jobs?reason=scope-repo")
    assert sorted(re.findall(r'<a href="/jobs/(d\d)">', page.text)) == ["d0", "d1"]
    q = Queue(redis, "jobs", prefix)
    job = Job(id="on-web", kind="forge", forge="github", repo="acme/web", number=7, command=["x"])
    await q.enqueue([NewJob("on-web", encode_job(job))])
    found = await http.get("/jobs?target=acme/web")
    assert re.findall(r'<a href="/jobs/([\w-]+)">', found.text) == ["on-web"]


async def test_the_job_page_tells_its_story_and_shows_secrets_as_references(
    http: httpx.AsyncClient, client: Client
) -> None:
    env: dict[str, str | SecretRef] = {"TOKEN": SecretRef("vault/api"), "PLAIN": EVIL}
    done = await client.submit(Job(id="story", command=["echo", EVIL], env=env))
    page = await http.get(f"/jobs/{done.id}")
    assert page.status_code == 200
    assert "Job story on queue jobs is waiting." in page.text
    assert "vault/api" in page.text and EVIL not in page.text
    assert 'data-events="/jobs/story/output"' in page.text


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("/jobs/no-such-job", 404),
        ("/jobs/" + "x" * 300, 404),
        ("/jobs?state=sleeping", 400),
        ("/jobs?reason=not-a-reason", 400),
        ("/jobs?page=3", 400),
        ("/jobs?at=not.a.cursor", 400),
        ("/jobs?at=999999.9999999999", 200),  # past the end: an empty page, not an error
        ("/jobs?id=" + "a" * 500, 400),
        ("/nowhere", 404),
    ],
)
async def test_bad_input_gets_a_4xx_page_in_one_line(
    http: httpx.AsyncClient, url: str, status: int
) -> None:
    answer = await http.get(url)
    assert answer.status_code == status, answer.text
    assert "Traceback" not in answer.text
    if status != 200:
        assert re.search(r'<p class="detail">[^<\n]+</p>', answer.text)


async def test_an_unknown_action_is_404_for_an_operator(http: httpx.AsyncClient) -> None:
    csrf = await signed_in(http)
    answer = await http.post("/act/explode", data={"csrf": csrf, "confirmed": "1"})
    assert answer.status_code == 404


async def test_a_redis_that_cannot_be_reached_is_said_not_raised(settings: Settings) -> None:
    from dispatch.web.app import build

    dead = Client(Redis.from_url("redis://127.0.0.1:1", socket_connect_timeout=0.2), "p")
    app = build(settings, dead)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        overview = await http.get("/")
        jobs = await http.get("/jobs")
    await dead.redis.aclose()
    assert overview.status_code == 200 and "Redis cannot be read" in overview.text
    assert jobs.status_code == 503 and "Redis cannot be read" in jobs.text


async def test_triggers_in_words_and_run_now_and_pause_by_an_operator(
    http: httpx.AsyncClient, client: Client, settings: Settings
) -> None:
    trigger = {"id": "tidy", "cron": "*/5 * * * *", "job": {"command": ["true"]}}
    (settings.config_dir / "triggers.json").write_text(
        json.dumps({"version": 1, "triggers": [trigger]})
    )
    page = await http.get("/triggers")
    assert "Every 5 minutes (UTC)" in page.text and "/act/" not in page.text
    csrf = await signed_in(http)
    ran = await http.post(
        "/act/trigger-run", data={"csrf": csrf, "target": "tidy", "confirmed": "1"}
    )
    assert ran.status_code == 303 and "trigger tidy minted job" in (await http.get("/")).text
    assert [v.state for v in await client.list()] == ["waiting"]
    paused = await http.post(
        "/act/trigger-pause", data={"csrf": csrf, "target": "tidy", "confirmed": "1"}
    )
    assert paused.status_code == 303
    assert ">paused<" in (await http.get("/triggers")).text
    missing = await http.post("/act/trigger-run", data={"csrf": csrf, "target": "nope"})
    assert missing.status_code == 404


@settings_(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    params=st.dictionaries(
        st.sampled_from([*listing.FIELDS, "page", "x"]) | st.text(max_size=8),
        st.text(max_size=300),
        max_size=4,
    )
)
async def test_no_query_string_makes_the_jobs_page_fail(
    http: httpx.AsyncClient, params: dict[str, str]
) -> None:
    answer = await http.get("/jobs", params=params)
    assert answer.status_code in (200, 400), (params, answer.text[-300:])
    assert "Traceback" not in answer.text


async def test_every_reason_the_overview_links_lists_its_jobs(
    http: httpx.AsyncClient, client: Client, redis: Redis, prefix: str
) -> None:
    await fleet(redis, prefix)
    await client.submit(Job(id="later", command=["x"]), delay_ms=3_600_000)
    overview = (await http.get("/")).text
    links = re.findall(r'<a href="(/jobs\?state=delayed&amp;reason=[^"]+)">', overview)
    assert len(links) == 3  # scope-repo, pause-window and scheduled (the --after job)
    for link in links:
        page = await http.get(link.replace("&amp;", "&"))
        assert page.status_code == 200 and re.search(r'<a href="/jobs/\w+">', page.text), link
    scheduled = await http.get("/jobs?reason=scheduled")
    assert re.findall(r'<a href="/jobs/(\w+)">', scheduled.text) == ["later"]


async def test_signing_out_needs_the_pages_own_form(http: httpx.AsyncClient) -> None:
    csrf = await signed_in(http)
    assert (await http.post("/signout", data={"csrf": "forged"})).status_code == 403
    assert 'action="/signout"' in (await http.get("/")).text  # still signed in
    assert (await http.post("/signout", data={"csrf": csrf})).status_code == 303
    assert 'action="/signout"' not in (await http.get("/")).text


async def test_a_cluster_node_s_url_is_served_as_the_cluster_it_belongs_to(
    settings: Settings, cluster_url: str
) -> None:
    """`dispatch web` given one node's plain URL: its client asks at the first request and
    reads every queue's keys from their own nodes (no MOVED page), the overview and the jobs
    page alike."""
    from dataclasses import replace

    from redis.asyncio import RedisCluster

    from dispatch.web.app import build

    node = replace(settings, redis_url=cluster_url.split(",")[0])
    web_client = Client.from_settings(node)
    app = build(node, web_client)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        jobs = await http.get("/jobs")
        overview = await http.get("/")
    await web_client.redis.aclose()
    assert isinstance(web_client.redis, RedisCluster)
    assert jobs.status_code == 200 and overview.status_code == 200
    assert "cannot be read" not in overview.text and "MOVED" not in jobs.text
