"""Headless Chromium for the browser tests, and the example shop it drives.

The browser is Debian's ``chromium`` (``tools/bootstrap.sh --browser``
installs it), driven by Playwright; nothing is downloaded at run time. A
missing browser or driver fails the suite: it never skips.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.acceptance.processes import ExampleShop
from tools.servers import RedisServer

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError as exc:  # pragma: no cover - a setup problem, said plainly
    raise ImportError(
        "the browser tests need Playwright: install the 'browser' dependency "
        "group (tools/bootstrap.sh installs 'dev', which includes it)"
    ) from exc

#: Debian's chromium; DELAYQ_CHROMIUM points elsewhere.
CHROMIUM = Path(os.environ.get("DELAYQ_CHROMIUM", "/usr/bin/chromium"))

#: Waits in the page (navigation, elements appearing, live updates) allow
#: for a busy machine; the waits for a task to run say their own.
expect.set_options(timeout=15_000)


@pytest.fixture(scope="session")
def chromium() -> Iterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} not found: install Debian's chromium "
            f"(tools/bootstrap.sh --browser, or apt-get install chromium), or "
            f"point DELAYQ_CHROMIUM at a Chromium binary"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            # Containers give /dev/shm 64 MB, too little for Chromium.
            args=["--disable-dev-shm-usage"],
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tests leave screenshots for a person: DELAYQ_SCREENSHOTS, or
    a temporary directory."""
    chosen = os.environ.get("DELAYQ_SCREENSHOTS")
    directory = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="module")
def shop(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ExampleShop]:
    """The example shop with the processes `make example` runs; orders wait
    10 minutes unless a test asks for less."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    directory = tmp_path_factory.mktemp("shop")
    env = {"SHOP_ORDER_CANCEL_DELAY": "600"}
    with ExampleShop(redis_server.url, directory, env) as running:
        yield running
        # Shown by pytest only when a test failed.
        print(running.logs())


def open_tab(chromium: Browser, shop: ExampleShop, width: int) -> Iterator[Page]:
    """A tab on ``shop`` of ``width`` pixels, for a module's tests (the admin
    login carries over between them); no JavaScript error may happen in it."""
    context = chromium.new_context(
        base_url=shop.url, viewport={"width": width, "height": 900}
    )
    context.set_default_timeout(15_000)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield tab
    finally:
        context.close()
    assert errors == [], f"JavaScript errors in the pages: {errors}"


@pytest.fixture(scope="module")
def page(chromium: Browser, shop: ExampleShop) -> Iterator[Page]:
    yield from open_tab(chromium, shop, 1280)
