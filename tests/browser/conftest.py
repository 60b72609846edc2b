"""Real-browser tests: the slide decks and the labs in headless Chromium, driven by Playwright.

Run them with `make browser-test` (after `bash slides/install_browser.sh`): it builds the decks at
the smoke size, then runs this folder with LAB_BROWSER_TESTS=1. Without that variable the tests
that need a browser are skipped, so `pytest tests` stays quick on a machine with no browser; with
it, a missing browser is a failure. Checks of the sources (decks, slide metadata) always run.

The browser is the distribution's Chromium (never a downloaded one), started with the flags a
closed network needs. Every request a page makes is recorded; anything that is not file:// or
127.0.0.1 is aborted and fails the test. Screenshots go to artifacts/browser/ (not committed).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("BROWSER_ARTIFACTS", ROOT / "artifacts" / "browser"))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    # any name but localhost fails to resolve at once: nothing can leave the machine
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
ENABLED = os.environ.get("LAB_BROWSER_TESTS") == "1"


def pytest_collection_modifyitems(config, items):
    """Tests that need the browser (or a JupyterLab server) run only under `make browser-test`;
    the quick checks of the deck sources and the labs' slide metadata run everywhere."""
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason="needs a browser: run `make browser-test` (LAB_BROWSER_TESTS=1)")
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here) and {"browser", "open_page", "server"} & set(
            getattr(item, "fixturenames", ())
        ):
            item.add_marker(pytest.mark.slow)
            if not ENABLED:
                item.add_marker(skip)


def is_local(url: str) -> bool:
    u = urlparse(url)
    return u.scheme in ("file", "data", "blob", "about") or (
        u.scheme in ("http", "https", "ws", "wss") and u.hostname in LOCAL_HOSTS
    )


@dataclass
class PageLog:
    """What a page did: every request, the ones refused, console errors and uncaught exceptions."""

    requests: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)

    def assert_clean(self, ignore_console: tuple[str, ...] = ()) -> None:
        assert not self.blocked, f"requests left (or tried to leave) the machine: {self.blocked[:10]}"
        remote = [u for u in self.requests if not is_local(u)]
        assert not remote, f"non-local requests: {remote[:10]}"
        errors = [e for e in self.console_errors if not any(s in e for s in ignore_console)]
        assert not errors, f"console errors: {errors[:10]}"
        assert not self.page_errors, f"uncaught page errors: {self.page_errors[:10]}"


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} not found: run `bash slides/install_browser.sh` as root "
            "(Debian packages chromium, chromium-driver), or set CHROMIUM=/path/to/chromium"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def open_page(browser):
    """open_page(viewport=(w, h)) -> (page, log): a fresh context whose network is guarded."""
    contexts = []

    def make(viewport=(1280, 720)):
        ctx = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        contexts.append(ctx)
        log = PageLog()

        def guard(route):
            url = route.request.url
            if is_local(url):
                route.continue_()
            else:
                log.blocked.append(url)
                route.abort()

        ctx.route("**/*", guard)
        page = ctx.new_page()
        page.on("request", lambda r: log.requests.append(r.url))
        page.on("console", lambda m: m.type == "error" and log.console_errors.append(f"{m.text} @ {m.location}"))
        page.on("pageerror", lambda e: log.page_errors.append(str(e)))
        return page, log

    yield make
    for ctx in contexts:
        ctx.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


def which(name: str) -> str | None:
    return shutil.which(name)
