"""The web page in a real browser, as an operator meets it: Debian's chromium (through
Playwright) on a real `dispatch web` process, a real daemon running real processes, one Redis.

One daemon and one page process serve the module (`fleet`); each test submits jobs of its own
and finds them by id. The read-only test gets a prefix and a page process of its own, with no
daemon: were its forged pause to get through, it would pause only itself.

The overview is swapped in by server-sent events at most once a second and a host names its
running jobs in a heartbeat every 5 s, so a live change is awaited (Playwright's `expect`, up
to `LIVE_MS`), never slept for.

Each page's screenshot (1280x800) is left in its test's tmp dir; with DISPATCH_DOCS_IMG=1 the
overview's is copied to docs/img/web-overview.png as well (only then: a plain run leaves the
tree as it found it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.support.browser import chromium, fresh_page, screenshot, watch_errors
from tests.support.daemons import cli_env, daemon, dispatch, dispatch_json, state_of, wait_state
from tests.support.web import web

pytestmark = pytest.mark.e2e  # real daemon, page and browser processes, as tests/e2e/ has

TOKEN = "a-browser-test-token-0123456789"
LIVE_MS = 20_000  # a heartbeat (5 s) and a frame (1 s), with room for a busy machine
SCRIPT = "<script>window.__pwned=1</script>"
IMG = "<img src=x onerror=window.__pwned=2>"  # no "/": it can be a folder's name, a target
DOCS_IMG = Path(__file__).parents[2] / "docs" / "img" / "web-overview.png"
NIGHTLY = {"id": "nightly", "cron": "0 3 * * *", "job": {"command": ["true"]}}


@dataclass(frozen=True)
class Site:
    env: dict[str, str]
    url: str
    tmp: Path


def site_env(redis_url: str, tmp: Path) -> dict[str, str]:
    """A prefix of its own, a token to sign in with, a config dir: a repo limited to one job
    at a time (so a second job waits, `scope-repo`), a fleet cap of runs a day (a spend line)
    and a nightly trigger (never due here)."""
    env = cli_env(
        redis_url, f"wb{uuid.uuid4().hex[:10]}", tmp / "state", DISPATCH_HOST="web-host",
        DISPATCH_CONCURRENCY="4", DISPATCH_WEB_TOKEN=TOKEN,
    )  # fmt: skip
    config = Path(env["DISPATCH_CONFIG_DIR"])
    config.mkdir(parents=True)
    rows = [{"scope": "acme/web", "concurrent": 1}, {"scope": "*", "day": 500}]
    limits = {"version": 1, "limits": rows}
    (config / "scoped-limits.json").write_text(json.dumps(limits))
    (config / "triggers.json").write_text(json.dumps({"version": 1, "triggers": [NIGHTLY]}))
    return env


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as found:
        yield found


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with fresh_page(browser) as found:
        yield found


@pytest.fixture(scope="module")
def fleet(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("web")
    env = site_env(redis_url, tmp)
    with daemon(env), web(env) as url:
        yield Site(env, url, tmp)


@pytest.fixture
def quiet(redis_url: str, tmp_path: Path) -> Iterator[Site]:
    """A page on a prefix of its own and no daemon."""
    env = site_env(redis_url, tmp_path)
    with web(env) as url:
        yield Site(env, url, tmp_path)


def submit(env: dict[str, str], *args: str) -> str:
    done = dispatch(env, "submit", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def section(page: Page, heading: str) -> Locator:
    named = page.get_by_role("heading", name=heading, exact=True)
    return page.locator("section").filter(has=named)


def row(page: Page, heading: str, text: str) -> Locator:
    return section(page, heading).locator("tbody tr", has_text=text)


def test_the_overview_shows_a_job_start_and_end_live(fleet: Site, page: Page) -> None:
    go = fleet.tmp / "go-live"
    page.goto(f"{fleet.url}/")
    page.evaluate("window.__loaded = 1")  # still there at the end: swapped in, not reloaded
    job = submit(fleet.env, "--", "sh", "-c", f"while [ ! -e {go} ]; do sleep .05; done")
    running = row(page, "Running", job)
    expect(running).to_contain_text("web-host", timeout=LIVE_MS)
    go.touch()
    expect(row(page, "Ended", job)).to_contain_text("completed", timeout=LIVE_MS)
    expect(running).to_have_count(0)
    assert page.evaluate("window.__loaded") == 1


def test_filters_find_a_job_and_its_page_tells_why(fleet: Site, page: Page) -> None:
    later = submit(fleet.env, "--after", "+1h", "--", "true")
    done = submit(fleet.env, "--", "true")
    wait_state(fleet.env, done, "completed")
    page.goto(f"{fleet.url}/jobs")
    page.locator("select[name=state]").select_option("delayed")
    page.locator("input[name=id]").fill(later)
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(rf"/jobs\?state=delayed&.*id={later}"))
    rows = page.locator("#jobs tbody tr")
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text("delayed")

    page.goto(f"{fleet.url}/jobs?state=completed&id={done}")
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text(done)
    page.goto(f"{fleet.url}/jobs?state=delayed&id={done}")
    expect(rows).to_have_text("no job matches")

    page.goto(f"{fleet.url}/jobs?state=delayed&id={later}")
    page.get_by_role("link", name=later).click()
    expect(page).to_have_url(f"{fleet.url}/jobs/{later}")
    story = section(page, "Why").locator("#story")
    expect(story).to_contain_text(f"Job {later}")
    expect(story).to_contain_text("scheduled to start")


FORGE = """async ([path, fields]) => {
  const answer = await fetch(path, {method: "POST", body: new URLSearchParams(fields)});
  return answer.status;
}"""


def test_a_read_only_session_sees_no_action_and_a_forged_post_is_refused(
    quiet: Site, page: Page
) -> None:
    job = submit(quiet.env, "--after", "+1h", "--", "true")
    for path in ("/", "/jobs", "/triggers", f"/jobs/{job}"):
        page.goto(f"{quiet.url}{path}")
        expect(page.locator("nav .who")).to_contain_text("read-only")
        expect(page.locator("form[action^='/act/']")).to_have_count(0)
    expect(page.locator("#story")).to_contain_text(f"Job {job}")  # an operator sees a cancel
    pause = page.evaluate(FORGE, ["/act/pause", {"csrf": "", "target": "", "confirmed": "1"}])
    cancel = page.evaluate(FORGE, ["/act/cancel", {"csrf": "", "target": job, "confirmed": "1"}])
    assert (pause, cancel) == (403, 403)
    assert dispatch_json(quiet.env, "status")["paused"] == ""
    assert state_of(quiet.env, job) == "delayed"


def sign_in(page: Page, url: str) -> None:
    page.goto(f"{url}/signin")
    page.get_by_label("Token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{url}/")
    expect(page.locator("nav .who")).to_contain_text("operator")


def test_a_signed_in_cancel_stops_a_running_job(fleet: Site, page: Page) -> None:
    job = submit(fleet.env, "--", "sleep", "60")
    wait_state(fleet.env, job, "active")
    sign_in(page, fleet.url)
    page.goto(f"{fleet.url}/jobs/{job}")
    page.get_by_role("button", name="cancel this job").click()
    expect(page.locator(".question")).to_have_text(f"Cancel job {job}? A running job is stopped.")
    assert state_of(fleet.env, job) == "active"  # the first POST only asks
    page.locator("#confirm").click()
    expect(page).to_have_url(f"{fleet.url}/jobs/{job}")
    expect(page.locator(".said")).to_contain_text(f"{job}: cancel")
    assert wait_state(fleet.env, job, "cancelled", "completed", "failed") == "cancelled"
    [run] = [r for r in dispatch_json(fleet.env, "runs") if r["id"] == job]
    assert (run["outcome"], run["reason"]) == ("cancelled", "operator-cancel")


def inert(page: Page) -> None:
    """Nothing injected ran or became an element: the text was escaped, not parsed."""
    assert page.evaluate("typeof window.__pwned") == "undefined"
    expect(page.locator("main script")).to_have_count(0)
    expect(page.locator("main img")).to_have_count(0)


def test_an_injected_script_never_runs_and_shows_as_text(fleet: Site, page: Page) -> None:
    folder = fleet.tmp / IMG  # the job's target is its folder's name
    folder.mkdir()
    job = submit(fleet.env, "--folder", str(folder), "--", "sh", "-c", f"echo '{SCRIPT}'; sleep 60")
    try:
        wait_state(fleet.env, job, "active")
        answer = page.goto(f"{fleet.url}/")
        assert answer is not None  # and were escaping to fail, inline script is refused too:
        assert "script-src 'self';" in answer.headers["content-security-policy"]
        expect(row(page, "Running", job)).to_contain_text(IMG, timeout=LIVE_MS)
        inert(page)
        page.goto(f"{fleet.url}/jobs?target={quote(IMG)}&id={job}")  # the filter shown back
        expect(page.locator("#jobs tbody tr")).to_contain_text(IMG)
        expect(page.locator("input[name=target]")).to_have_value(IMG)
        inert(page)
        page.goto(f"{fleet.url}/jobs/{job}")
        expect(page.locator("#output")).to_have_text(f"{SCRIPT}\n")  # its live output
        expect(page.locator("#document")).to_contain_text(SCRIPT)
        expect(page.locator("#document")).to_contain_text(IMG)
        inert(page)
        page.goto(f"{fleet.url}/jobs/{quote(IMG)}")  # an id shown back on the error page
        expect(page.locator(".detail")).to_contain_text(IMG)
        inert(page)
    finally:
        dispatch(fleet.env, "cancel", job)


@dataclass(frozen=True)
class Scene:
    running: str
    waiting: str
    later: str


@pytest.fixture(scope="module")
def scene(fleet: Site) -> Iterator[Scene]:
    """A fleet worth a picture: a job running, one waiting on its repo's limit, one for later."""
    env = fleet.env
    work = ["sh", "-c", "echo building acme/web#1; sleep 120"]
    running = submit(env, "--repo", "acme/web", "--number", "1", "--", *work)
    wait_state(env, running, "active")
    waiting = submit(env, "--repo", "acme/web", "--number", "2", "--", "true")
    later = submit(env, "--after", "+1h", "--", "true")
    wait_state(env, waiting, "delayed")
    yield Scene(running, waiting, later)
    for job in (running, waiting, later):
        dispatch(env, "cancel", job)


PAGES = {
    "overview": "/",
    "jobs": "/jobs",
    "job": "/jobs/{running}",
    "hosts": "/hosts",
    "triggers": "/triggers",
    "spend": "/spend",
    "runs": "/runs",
}


@pytest.mark.parametrize(("reason", "job"), [("scope-repo", "waiting"), ("scheduled", "later")])
def test_a_waiting_reason_on_the_overview_links_to_its_jobs(
    fleet: Site, scene: Scene, page: Page, reason: str, job: str
) -> None:
    page.goto(f"{fleet.url}/")
    link = row(page, "Waiting", reason).get_by_role("link", name=reason, exact=True)
    link.click()
    expect(page.locator("main h1")).to_have_text("Jobs")
    expect(page.locator("#jobs tbody tr", has_text=getattr(scene, job))).to_contain_text("delayed")


@pytest.mark.parametrize("name", list(PAGES))
def test_every_page_renders_a_real_fleet(
    fleet: Site, scene: Scene, page: Page, tmp_path: Path, name: str
) -> None:
    path = PAGES[name].format(running=scene.running)
    errors = watch_errors(page)
    answer = page.goto(f"{fleet.url}{path}")
    assert answer is not None and answer.status == 200, page.locator("main").inner_text()
    if name == "overview":  # the live frame that names the running job, and why two wait
        expect(row(page, "Running", scene.running)).to_be_visible(timeout=LIVE_MS)
        expect(row(page, "Waiting", "scope-repo")).to_be_visible()
    if name == "job":
        expect(page.locator("#output")).to_contain_text("building acme/web#1")
    shot = screenshot(page, tmp_path, name)
    assert errors == []
    if name == "overview" and os.environ.get("DISPATCH_DOCS_IMG") == "1":
        DOCS_IMG.parent.mkdir(exist_ok=True)
        shutil.copyfile(shot, DOCS_IMG)
