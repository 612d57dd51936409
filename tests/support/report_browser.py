"""Headless Chromium for the HTML report: how it is launched, and a visit that records what a page did.

Debian's ``chromium`` package (``apt-get install chromium``, which ``.ci/run`` does) driven by
Playwright. The launch flags keep Chromium from calling home (update checks, sync, field
trials): on a closed network those calls fail, and they are not the report's requests.

Usage::

    with launch(profile_dir) as context:
        visit = open_report(context, Path("portrait.html"))
        visit.errors, visit.requests, visit.dialogs
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
CHROMIUM_ENV = "LOADPROBE_CHROMIUM"  # path of a Chromium binary, when it is not on PATH


def chromium_path() -> str | None:
    explicit = os.environ.get(CHROMIUM_ENV)
    if explicit:
        return explicit if Path(explicit).exists() else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def skip_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed: pip install -e '.[test]'"
    if chromium_path() is None:
        return f"no Chromium browser: apt-get install chromium (.ci/run does), or set {CHROMIUM_ENV}"
    return None


@contextlib.contextmanager
def launch(profile_dir: Path):
    """A headless Chromium context with an empty profile in ``profile_dir``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile_dir), executable_path=chromium_path(), headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()


@dataclass
class Visit:
    page: object
    url: str
    errors: list = field(default_factory=list)  # console errors and uncaught exceptions
    requests: list = field(default_factory=list)  # every URL the page asked for, its own included
    dialogs: list = field(default_factory=list)  # alert/confirm/prompt messages (an XSS would open one)


def open_report(context, path: Path, *, width: int = 1280, scheme: str = "light", timeout_s: float = 60) -> Visit:
    """Open ``path`` and wait until its charts are drawn (or failed to be)."""
    page = context.new_page()
    visit = Visit(page=page, url=Path(path).resolve().as_uri())
    page.on("console", lambda m: visit.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: visit.errors.append(str(e)))
    page.on("request", lambda r: visit.requests.append(r.url))
    page.on("dialog", lambda d: (visit.dialogs.append(d.message), d.dismiss()))
    page.route("http*://**", lambda route: route.abort())  # anything outbound fails here, and is still recorded
    page.emulate_media(color_scheme=scheme)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(visit.url)
    # A selector wait, not wait_for_function: the report's CSP forbids the eval that one uses.
    page.wait_for_selector("html[data-charts]", state="attached", timeout=timeout_s * 1000)
    return visit


def wait_until(page, expression: str, timeout_s: float = 10) -> None:
    """Poll ``expression`` in the page until it is truthy (evaluated over CDP, outside the page's CSP)."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {expression}")
        time.sleep(0.05)


DRAWN = """() => Array.from(document.querySelectorAll('[data-figure]')).map(el => ({
    id: el.dataset.figure,
    traces: (el.data || []).length,
    points: (el.data || []).reduce((n, t) => n + ((t.y || t.x || []).filter(v => v !== null).length), 0),
    drawn: el.querySelectorAll('.scatterlayer .trace, .barlayer .trace').length,
    label: el.getAttribute('aria-label') || '',
    tabindex: el.getAttribute('tabindex'),
    width: el.getBoundingClientRect().width,
}))"""


def pixel_spread(png: bytes) -> float:
    """Standard deviation of grey levels: about 0 for a blank screenshot."""
    from PIL import Image, ImageStat

    return ImageStat.Stat(Image.open(io.BytesIO(png)).convert("L")).stddev[0]


def background_level(png: bytes) -> float:
    """Mean grey level of the top-left corner: the page background."""
    from PIL import Image, ImageStat

    image = Image.open(io.BytesIO(png)).convert("L")
    return ImageStat.Stat(image.crop((0, 0, 12, 12))).mean[0]
