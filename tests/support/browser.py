"""Debian's Chromium for the tests that look at a page (the Chaos tab, report.html),
driven headless through Playwright: never a browser Playwright would download.

`browser_page(profile_parent, width=...)` opens a fresh profile under the given folder
and yields one page; a missing Chromium or Playwright fails the test with how to
install it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")
# As root, on a machine whose network reaches nothing but loopback: no sandbox, and none
# of the background connections Chromium would otherwise try at every start.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_path() -> str:
    """Debian's Chromium, or a failed test that says how to install it."""
    for candidate in CHROMIUM_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    pytest.fail("chromium is not installed: the browser tests drive Debian's Chromium. "
                "Install it with `apt-get install chromium` (scripts/setup.sh does it), "
                "or run `make test` after scripts/setup.sh.")
    raise AssertionError("unreachable")


@contextmanager
def browser_page(profile_parent: Path, *, width: int = 1280, height: int = 1000,
                 timeout_ms: int = 20_000) -> Iterator[Any]:
    """One page of a headless Chromium with a fresh profile (Playwright passes it as
    --user-data-dir), closed afterwards."""
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[dev]' (scripts/setup.sh does it)")
    with sync_playwright() as playwright, tempfile.TemporaryDirectory(dir=profile_parent) as profile:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=executable, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": width, "height": height})
        try:
            page = context.new_page()
            page.set_default_timeout(timeout_ms)
            yield page
        finally:
            context.close()
