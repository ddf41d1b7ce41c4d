"""Real-browser test support: Debian's chromium + chromedriver located (or the reason they are not), the service
app served by uvicorn in a thread on a free port, and a headless selenium driver.

``.ci/chromium.sh`` installs the browser in CI and exports ``REPLISCOPE_CHROMIUM`` / ``REPLISCOPE_CHROMEDRIVER``
(or ``REPLISCOPE_BROWSER_SKIP`` with the reason it could not); outside CI they are looked up on PATH.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"

T = TypeVar("T")


def browser_paths() -> tuple[str, str]:
    """(chromium, chromedriver) executables; skips the test with the reason when either is absent."""
    reason = os.environ.get("REPLISCOPE_BROWSER_SKIP")
    if reason:
        pytest.skip(f"browser tests: {reason}")
    pytest.importorskip("selenium", reason="selenium is not installed (the 'dev' extra)")
    chromium = os.environ.get("REPLISCOPE_CHROMIUM") or next(
        (p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))), None
    )
    driver = (
        os.environ.get("REPLISCOPE_CHROMEDRIVER")
        or shutil.which("chromedriver")
        or ("/usr/lib/chromium/chromedriver" if Path("/usr/lib/chromium/chromedriver").is_file() else None)
    )
    if not chromium:
        pytest.skip(
            "browser tests: chromium is not installed (apt-get install chromium chromium-driver; "
            ".ci/chromium.sh does it in CI)"
        )
    if not driver:
        pytest.skip(
            "browser tests: chromedriver is not installed (apt-get install chromium-driver; "
            ".ci/chromium.sh does it in CI)"
        )
    return chromium, driver


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def live_server(app: Any, *, timeout: float = 30.0) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a daemon thread on a free localhost port; yields the base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="uvicorn-browser-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("uvicorn stopped before it started serving (see the log above)")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"uvicorn did not start within {timeout:.0f} s")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@contextmanager
def chromium_driver(chromium: str, chromedriver: str, *, width: int = 1280, height: int = 900) -> Iterator[WebDriver]:
    """A headless chromium driven by selenium through the given chromedriver (no Selenium Manager download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--force-device-scale-factor=1",
        "--lang=en-US",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def set_width(driver: WebDriver, width: int, height: int = 900) -> None:
    """Resize the viewport (not the window) to ``width`` CSS px via the DevTools device metrics override."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )


WIDER_THAN_VIEWPORT = """
const width = arguments[0];
return [...document.querySelectorAll('body *')]
  .filter(e => !e.closest('.scroll, pre') && (e.getBoundingClientRect().right > width + 0.5 ||
               (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX === 'visible')))
  .slice(0, 5).map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className ? '.' + e.className : ''));
"""
"""Up to five elements reaching past the viewport's right edge or whose content overflows them (outside the
boxes that scroll by themselves)."""


TOUR = {
    "runs-page": "Runs: every run with its task's headline metric, interval and verdict; filter, sort, download.",
    "runs-columns": "Runs: choose the columns (kept, and in the link); the defaults fit 1280 px, filters fold.",
    "run": "A run: provenance at a glance, the claim verdict with its reason, the claim against the interval.",
    "compare": "Compare two runs: metrics, paired statistics, flipped samples, what differs between the stacks.",
    "compare-n": "Compare many runs: a metric chart across runtimes, stacks and variants.",
    "compare-timings": "Compare: latency and throughput, and the conditions that make them comparable.",
    "charts": "Charts: a metric across runs by runtime, stack, version, variant, dataset or model, with intervals.",
    "models-best-verdict": "Models: one row per model, runtime and dataset with its best-supported judged verdict.",
    "wizard-upload": "New job: upload and validate a manifest, then choose what to run and where.",
    "job": "A job: its progress, its log as readable lines, its result.",
    "artifacts": "A run's artifacts: its reports, samples, record and trace as files, to view or download.",
    "diff-page": "A diff: the first op that diverges and the pitfall that explains it.",
    "benchmarks-page": "Benchmarks: latency and throughput records, browsable like runs.",
    "stack-matrix": "A stack matrix: one manifest across software stacks, each pair compared.",
    "agents": "Agents: what each one advertises and runs.",
}
"""The UI tour's screenshots (docs/guides/ui-tour.md): a browser test's screenshot of one of these names also
becomes ``docs/images/tour-<name>.png`` under ``make screenshots`` (:func:`docs_image`)."""
DOCS_IMAGES = REPO / "docs" / "images"
DOCS_MAX_HEIGHT = 1400
"""The docs show the top of each page (what a user sees first and a screen or two below)."""


def docs_image(paths: list[Path], name: str) -> None:
    """With REPLISCOPE_DOCS_SCREENSHOTS=1 (``make screenshots``): the 1280 px screenshot, its top
    :data:`DOCS_MAX_HEIGHT` px in 256 colours, becomes docs/images/<name>.png."""
    if os.environ.get("REPLISCOPE_DOCS_SCREENSHOTS") != "1":
        return
    from PIL import Image

    with Image.open(paths[0]) as shot:
        top = shot.convert("RGB").crop((0, 0, shot.width, min(shot.height, DOCS_MAX_HEIGHT)))
    top.quantize(256, dither=Image.Dither.NONE).save(DOCS_IMAGES / f"{name}.png", optimize=True)


def screenshot(driver: WebDriver, name: str, widths: tuple[int, ...] = (1280, 390)) -> list[Path]:
    """Full-page PNG screenshots of the current page at each width under ``test-artifacts/``; the page must not
    scroll sideways at any of them (wide tables and logs scroll inside their own boxes)."""
    ARTIFACTS.mkdir(exist_ok=True)
    paths = []
    for width in widths:
        set_width(driver, width)
        height = int(
            driver.execute_script("return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
        )
        set_width(driver, width, min(max(height, 600), 8000))
        scroll_width = int(driver.execute_script("return document.documentElement.scrollWidth"))
        assert scroll_width <= width, (
            f"{driver.current_url} at {width} px scrolls sideways (the page is {scroll_width} px wide): "
            + ", ".join(driver.execute_script(WIDER_THAN_VIEWPORT, width))
        )
        path = ARTIFACTS / f"{name}-{width}.png"
        driver.save_screenshot(str(path))
        assert path.stat().st_size > 1000, f"{path} is a blank screenshot"
        paths.append(path)
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    if name in TOUR and widths[0] == 1280:
        docs_image(paths, f"tour-{name}")
    return paths


def at_path(driver: WebDriver, path: str) -> bool:
    """Whether the page shown is ``path`` exactly (``/login?next=/new`` ends with ``/new`` but is not there)."""
    from urllib.parse import urlsplit

    return urlsplit(driver.current_url).path == path


@contextmanager
def served(app: Any) -> Iterator[str]:
    """``app`` on a live loopback server (:func:`live_server`); its executor and in-process cluster closed
    afterwards, whatever happened."""
    try:
        with live_server(app) as url:
            yield url
    finally:
        app.state.executor.shutdown(wait=True)
        app.state.cluster.close()


@contextmanager
def logged_in_browser(url: str, token: str, landing: str, *, downloads: Path | None = None) -> Iterator[WebDriver]:
    """Chromium signed in with ``token`` through the login form (focused on load: typed at once, then Enter), on
    ``landing`` (a path); ``downloads``: the folder downloads go to."""
    from selenium.webdriver.common.keys import Keys

    chromium, chromedriver = browser_paths()
    with chromium_driver(chromium, chromedriver) as d:
        if downloads is not None:
            d.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        d.get(f"{url}/login?next={landing}")
        assert d.switch_to.active_element.get_attribute("id") == "token"
        d.switch_to.active_element.send_keys(token, Keys.ENTER)
        poll(lambda: at_path(d, landing), timeout=30, what=f"{landing} after logging in")
        yield d


def replaced_while_read(exc: Exception) -> bool:
    """Whether ``exc`` means the element read was replaced under the reader (the page was navigating): a stale
    element, or Chromium's "Node with given id does not belong to the document" for a node detached mid-call."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    if isinstance(exc, StaleElementReferenceException):
        return True
    return isinstance(exc, WebDriverException) and "does not belong to the document" in str(exc)


def poll(check: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.5) -> T:
    """Call ``check`` until it returns something other than None/False; fails naming ``what`` after ``timeout``. A
    check that read an element the page replaced meanwhile (:func:`replaced_while_read`) counts as not yet."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:
            if not replaced_while_read(exc):
                raise
            last = None
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def page_images(driver: WebDriver) -> list[dict[str, Any]]:
    """Every <img> of the page once loaded or failed (lazy ones made eager first): classes, src (truncated),
    complete, naturalWidth/Height."""
    return list(
        driver.execute_async_script(
            """
        const done = arguments[arguments.length - 1];
        const imgs = [...document.querySelectorAll('img')];
        imgs.forEach(i => { if (i.loading === 'lazy') i.loading = 'eager'; });  // else off-screen ones never load
        Promise.all(imgs.map(i => i.complete ? Promise.resolve() : i.decode().catch(() => null))).then(() =>
          done(imgs.map(i => ({classes: [...i.classList], src: (i.currentSrc || i.src).slice(0, 80),
                               complete: i.complete, width: i.naturalWidth, height: i.naturalHeight,
                               alt: i.alt}))));
        """
        )
    )
