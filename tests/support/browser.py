"""Debian's chromium driven by Playwright's sync API, for the web page's browser tests
(tests/web/test_browser.py). No browser build can be downloaded here, so Playwright launches
the system's own by its path, with the flags this machine's closed network needs; each launch
gets a fresh profile (Playwright makes a temporary user-data dir and removes it on close).

    chromium()              the browser, for a module's tests
    fresh_page(browser)     a page of its own context (its own cookies: a session signed in
                            on one never leaks into the next), 1280x800
    watch_errors(page)      the page's script errors and console errors, as they come
    screenshot(page, folder, name)   the page as folder/name.png

Without the browser a test fails in CI (CI=true), since a browser test that skips there would
pass having checked nothing; elsewhere it skips, saying what to install.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, ViewportSize, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
# Playwright adds --headless and its own fresh --user-data-dir; without the networking flags
# chromium keeps dialling Google's hosts, and this machine refuses every one of them
FLAGS = [
    "--no-sandbox",  # the tests run as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}
WAIT_MS = 10_000  # Playwright's own bound on any one step, well below the test's timeout


def need_chromium() -> None:
    """Fail in CI, skip elsewhere, when the browser is not installed."""
    if CHROMIUM.exists():
        return
    said = f"{CHROMIUM} is missing: apt-get install chromium (scripts/test.sh does)"
    if os.environ.get("CI") == "true":
        pytest.fail(said)
    pytest.skip(said)


@contextmanager
def chromium() -> Iterator[Browser]:
    """Headless chromium for the length of the `with`."""
    need_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=FLAGS
        )
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def fresh_page(browser: Browser) -> Iterator[Page]:
    """A page in a context of its own, closed (with its cookies) at the end."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(WAIT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


def watch_errors(page: Page) -> list[str]:
    """What goes wrong in the page from now on, as it happens: uncaught script errors and the
    console's errors (a refused Content-Security-Policy directive, a failed load)."""
    found: list[str] = []

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            found.append(f"console: {message.text}")

    page.on("pageerror", lambda error: found.append(f"uncaught: {error}"))
    page.on("console", console)
    return found


def screenshot(page: Page, folder: Path, name: str) -> Path:
    """What the page shows in its 1280x800 viewport, as `folder/name.png`."""
    path = folder / f"{name}.png"
    page.screenshot(path=path, type="png")
    return path
