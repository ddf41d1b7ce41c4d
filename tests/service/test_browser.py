"""The web UI in a real browser: Debian's chromium (headless) driven by selenium against the service served by
uvicorn on a free localhost port (tmp SQLite store, tmp cache).

Log in with a token (mouse-free too), submit an evaluation of the embedded default (EfficientNet-Lite0 on
foolbox_imagenet, onnxruntime) through the wizard, watch the job page until it succeeds, read the run page's claim
verdict, compare with a second run (torch, submitted through the API), check every chart image decodes.
Screenshots of each page at 1280 px and 390 px go to ``test-artifacts/``. Skipped with the reason when chromium or
chromedriver are absent (``.ci/chromium.sh`` installs them in CI).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import LITE0
from tests.service.browser_support import (
    browser_paths,
    chromium_driver,
    live_server,
    page_images,
    poll,
    screenshot,
)

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("uvicorn", reason="the 'service' extra is not installed")
pytest.importorskip("selenium", reason="selenium is not installed (the 'dev' extra)")

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

pytestmark = pytest.mark.browser

JOB_TIMEOUT_S = 420.0
"""An evaluation of Lite0 on the 20 foolbox images takes ~15 s here (ONNX export included); the bound leaves room
for a loaded 2-core CI machine."""

MANIFEST_REF = "efficientnet-lite0@1.0.0"
DATASET = "foolbox_imagenet"


@dataclass
class Service:
    url: str
    admin: str
    runner: str
    viewer: str
    chromium: str
    chromedriver: str
    store: Any = None


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The app as ``repliscope serve`` starts it (first start: a one-time admin token, foolbox_imagenet
    registered) on a tmp SQLite store and cache, with a runner and a viewer token and Lite0's manifest uploaded."""
    chromium, chromedriver = browser_paths()
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.accounts import create_token

    root = tmp_path_factory.mktemp("browser")
    (root / "cache").mkdir()
    app = create_app(ServiceConfig(db_url=f"sqlite:///{root / 'runs.db'}", cache_dir=root / "cache"))
    admin, registered = first_start(app.state.store)
    assert admin is not None and registered, "a fresh store gets an admin token and foolbox_imagenet"
    runner = create_token(app.state.store, "browser-runner", "runner")
    viewer = create_token(app.state.store, "browser-viewer", "viewer")
    with live_server(app) as url:
        svc = Service(url, admin, runner, viewer, chromium, chromedriver, app.state.store)
        datasets = _api(svc, "GET", "/datasets", svc.viewer)
        assert [d["name"] for d in datasets] == [DATASET]
        stored = _api(
            svc, "POST", "/manifests", svc.runner, content=LITE0.read_bytes(), headers={"Content-Type": "text/yaml"}
        )
        assert stored["ref"] == MANIFEST_REF and stored["created"] is True
        yield svc
    app.state.executor.shutdown(wait=True)
    app.state.cluster.close()


def _api(
    svc: Service, method: str, path: str, token: str, *, headers: dict[str, str] | None = None, **kwargs: Any
) -> Any:
    """A call to the live server's API with ``token``; fails the test on an error status."""
    import httpx

    response = httpx.request(
        method,
        f"{svc.url}/api/v1{path}",
        headers={"Authorization": f"Bearer {token}", **(headers or {})},
        timeout=60,
        **kwargs,
    )
    assert response.status_code < 400, f"{method} {path} -> {response.status_code}: {response.text[:500]}"
    return response.json()


@pytest.fixture
def driver(service: Service) -> Iterator[WebDriver]:
    with chromium_driver(service.chromium, service.chromedriver) as d:
        yield d


def _login(driver: WebDriver, svc: Service, token: str) -> None:
    driver.get(f"{svc.url}/login")
    field = driver.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token)
    driver.find_element(By.ID, "login").click()
    poll(lambda: "/login" not in driver.current_url, timeout=20, what="the redirect away from /login")


def _choose(driver: WebDriver, element_id: str, want: str) -> None:
    """Pick ``want`` in the wizard field ``element_id``: a <select> option whose value is ``want`` (or whose text
    contains it), or typed into an input."""
    element = driver.find_element(By.ID, element_id)
    if element.tag_name == "select":
        select = Select(element)
        values = [(o.get_attribute("value") or "", o.text) for o in select.options]
        match = next((v for v, _ in values if v == want), None) or next(
            (v for v, t in values if want in t or want in v), None
        )
        assert match is not None, f"#{element_id} has no option {want!r}: {values}"
        select.select_by_value(match)
    else:
        element.clear()
        element.send_keys(want)


def _job_id(driver: WebDriver) -> str:
    m = re.search(r"/jobs/([^/?#]+)", driver.current_url)
    assert m, f"the wizard did not lead to a job page: {driver.current_url}"
    return m.group(1)


def _wait_job_page(driver: WebDriver) -> str:
    seen: list[str] = []

    def status() -> str | None:
        text = driver.find_element(By.ID, "job-status").text.strip().lower()
        if not seen or seen[-1] != text:
            seen.append(text)
        if text in ("failed", "cancelled"):
            pytest.fail(f"the job {text}: {driver.find_element(By.TAG_NAME, 'body').text[:2000]}")
        return text if text == "succeeded" else None

    poll(status, timeout=JOB_TIMEOUT_S, what="#job-status == succeeded", interval=1.0)
    assert set(seen) <= {"queued", "running", "succeeded"}, f"#job-status showed {seen}"
    # the page was never reloaded: the status went from queued/running to succeeded by the page's own polling
    assert len(seen) >= 2 and seen[0] in ("queued", "running"), f"#job-status did not update live: {seen}"
    return seen[-1]


def _api_job(svc: Service, runtime: str) -> str:
    """Submit an evaluation through the API and wait for it; the stored run id."""
    job = _api(
        svc,
        "POST",
        "/jobs",
        svc.runner,
        json={"kind": "evaluate", "manifest": MANIFEST_REF, "runtime": runtime, "dataset": DATASET, "options": {}},
    )
    job_id = job["id"]

    def done() -> dict[str, Any] | None:
        state = _api(svc, "GET", f"/jobs/{job_id}", svc.viewer)
        if state["status"] in ("failed", "cancelled"):
            pytest.fail(f"API job {job_id} ({runtime}) {state['status']}: {state.get('error')}")
        return state if state["status"] == "succeeded" else None

    state = poll(done, timeout=JOB_TIMEOUT_S, what=f"API job {job_id} ({runtime}) to succeed", interval=1.0)
    ids = state.get("result_ids") or []
    assert ids, f"job {job_id} succeeded without a result id: {state}"
    return str(ids[0])


def _assert_images_decode(driver: WebDriver, page: str, charts: int) -> None:
    """Every <img> of the page decodes (``naturalWidth > 0``), ``img.chart`` among them at least ``charts``."""
    images = page_images(driver)
    found = sum(1 for i in images if "chart" in i["classes"])
    assert found >= charts, f"{page}: {found} img.chart, expected at least {charts}"
    broken = [i for i in images if not i["complete"] or i["width"] <= 0 or i["height"] <= 0]
    assert not broken, f"{page}: images that do not decode: {broken}"


def _table(driver: WebDriver, table_id: str) -> list[list[str]]:
    """The body rows of the table ``table_id`` as cell texts (header cells of a row included)."""
    rows = driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")
    return [[c.text.strip() for c in r.find_elements(By.CSS_SELECTOR, "th, td")] for r in rows]


def _keys(driver: WebDriver, *keys: str) -> None:
    """Type ``keys`` into whatever has the focus (no element targeted, no click)."""
    ActionChains(driver).send_keys(*keys).perform()


def _tab_to(driver: WebDriver, element_id: str, limit: int = 15) -> None:
    for _ in range(limit):
        _keys(driver, Keys.TAB)
        if driver.switch_to.active_element.get_attribute("id") == element_id:
            return
    pytest.fail(f"{limit} Tab presses never reached #{element_id} on {driver.current_url}")


def test_login_with_the_keyboard_only(service: Service, driver: WebDriver) -> None:
    """Tab to the token field, type, Tab to the button (a visible focus), Enter: logged in with an HttpOnly,
    SameSite=Strict cookie. A wrong token stays on /login with an error and no cookie."""
    driver.get(f"{service.url}/login")
    screenshot(driver, "login")
    _tab_to(driver, "token")
    _keys(driver, "rs_not-a-token", Keys.ENTER)
    alert = poll(
        lambda: driver.find_elements(By.CSS_SELECTOR, "[role=alert]"),
        timeout=20,
        what="the error of a wrong token on /login",
    )
    assert alert[0].text.strip(), "the wrong-token alert is empty"
    assert "/login" in driver.current_url
    assert driver.get_cookie("repliscope_token") is None

    driver.get(f"{service.url}/login")
    _tab_to(driver, "token")
    _keys(driver, service.viewer, Keys.TAB)
    button = driver.switch_to.active_element
    assert button.get_attribute("id") == "login", "Tab from #token does not land on #login"
    focus = driver.execute_script(
        "const s = getComputedStyle(arguments[0]); return [s.outlineStyle, s.outlineWidth, s.boxShadow]", button
    )
    assert focus[0] != "none" or focus[2] != "none", f"#login has no visible focus style: {focus}"
    _keys(driver, Keys.ENTER)
    poll(lambda: "/login" not in driver.current_url, timeout=20, what="the redirect away from /login")
    cookie = driver.get_cookie("repliscope_token")
    assert cookie is not None and cookie["value"] == service.viewer
    assert cookie["httpOnly"] is True
    assert cookie.get("sameSite") == "Strict"
    screenshot(driver, "after-login")


def test_wizard_evaluation_run_page_and_compare(service: Service, driver: WebDriver) -> None:
    _login(driver, service, service.runner)

    driver.get(f"{service.url}/new")
    _choose(driver, "wizard-manifest", MANIFEST_REF)
    _choose(driver, "wizard-runtime", "onnxruntime")
    _choose(driver, "wizard-dataset", DATASET)
    _choose(driver, "wizard-kind", "evaluate")
    screenshot(driver, "wizard")
    driver.find_element(By.ID, "wizard-submit").click()
    poll(lambda: "/jobs/" in driver.current_url, timeout=30, what="the job page after submitting the wizard")
    _job_id(driver)
    _wait_job_page(driver)
    screenshot(driver, "job")

    link = poll(
        lambda: driver.find_element(By.ID, "job-run-link").get_attribute("href"),
        timeout=30,
        what="#job-run-link on the finished job page",
    )
    m = re.search(r"/runs/([0-9a-f]+)", link)
    assert m, f"#job-run-link does not point at a run: {link}"
    run_a = m.group(1)
    driver.get(link)
    verdict = driver.find_element(By.ID, "verdict").text.strip().lower()
    assert "not comparable" in verdict, f"#verdict reads {verdict!r}"
    page_text = driver.find_element(By.TAG_NAME, "body").text
    assert "onnxruntime" in page_text and DATASET in page_text
    assert "90.0" in page_text, "the run page does not show Lite0's top-1 of 90.0 % (18/20) on foolbox_imagenet"
    _assert_images_decode(driver, f"/runs/{run_a}", charts=2)  # claim plot, batch latency
    screenshot(driver, "run")

    run_b = _api_job(service, "torch")
    assert run_b != run_a
    driver.get(f"{service.url}/compare?a={run_a}&b={run_b}")
    cells = {row[0]: row[1:] for row in _table(driver, "compare-table")}
    assert "top1" in cells, f"#compare-table has no top1 row: {list(cells)}"
    top1 = cells["top1"]
    # A and B over their own 20 samples: Lite0 gets 18/20 on foolbox_imagenet with onnxruntime and with torch
    assert (top1[0], top1[2]) == ("90.00 %", "90.00 %"), f"#compare-table top1 row: {top1}"  # metric_format
    assert top1[4] in ("+0.00 pp", "-0.00 pp"), f"#compare-table top1 delta: {top1}"
    stack = {row[0]: row[1:] for row in _table(driver, "stack-diff")}
    assert stack["runtime.runtime"] == ["onnxruntime", "torch", "differs"], stack.get("runtime.runtime")
    pipeline = _table(driver, "pipeline-diff")
    assert pipeline and all(row[-1] == "same" for row in pipeline), "the two runs ran the same pipeline"
    why = driver.find_element(By.ID, "compare-why").text
    assert "stacks differ" in why and "runtime.runtime" in why, f"#compare-why: {why}"
    assert "McNemar" in driver.find_element(By.ID, "mcnemar").text
    _assert_images_decode(driver, "/compare", charts=0)
    screenshot(driver, "compare")

    driver.get(f"{service.url}/runs")
    runs_text = driver.find_element(By.ID, "runs-table").text
    assert run_a[:8] in runs_text and run_b[:8] in runs_text, "the runs table does not list both runs"
    _assert_images_decode(driver, "/runs", charts=0)
    screenshot(driver, "runs")

    driver.get(f"{service.url}/")
    models = driver.find_element(By.ID, "models-table").text
    assert "efficientnet-lite0" in models and models.count("not comparable") == 2, (
        f"the models page does not show Lite0's verdict on onnxruntime and torch: {models}"
    )
    screenshot(driver, "models")


def _tab_to_link(driver: WebDriver, href: str, limit: int = 30) -> None:
    """Tab until the focus is on the link whose path is ``href``."""
    for _ in range(limit):
        _keys(driver, Keys.TAB)
        active = driver.switch_to.active_element
        if active.tag_name == "a" and (active.get_attribute("href") or "").endswith(href):
            return
    pytest.fail(f"{limit} Tab presses never reached the link {href} on {driver.current_url}")


def test_agents_and_a_stack_matrix_page_with_the_keyboard_only(service: Service, driver: WebDriver) -> None:
    """From the models page, Tab to the nav's Agents link, Enter: the embedded agent is listed alive with this
    venv's onnxruntime; Tab to a stored stack matrix's link, Enter: its stacks and pairs tables. Neither page
    scrolls sideways at 390 px."""
    from importlib.metadata import version

    from tests.service.matrices import FLIPPED, MATRIX_ID, make_matrix

    service.store.save_stack_matrix(make_matrix())
    _login(driver, service, service.viewer)
    driver.get(f"{service.url}/")
    _tab_to_link(driver, "/agents")
    _keys(driver, Keys.ENTER)
    poll(lambda: driver.current_url.endswith("/agents"), timeout=20, what="the agents page after Enter")
    [agent] = _table(driver, "agents-table")
    assert agent[1] == "alive", agent
    assert f"onnxruntime: onnxruntime {version('onnxruntime')}" in agent[2], agent
    screenshot(driver, "agents")

    _tab_to_link(driver, f"/stack-matrices/{MATRIX_ID}", limit=60)
    _keys(driver, Keys.ENTER)
    poll(lambda: MATRIX_ID in driver.current_url, timeout=20, what="the stack matrix page after Enter")
    stacks = _table(driver, "stacks-table")
    assert [(row[0].splitlines()[0], row[2]) for row in stacks] == [
        ("current", "90.00 %"),
        ("onnxruntime==1.20.1", "85.00 %"),
    ]
    [pair] = _table(driver, "pairs-table")
    assert pair[:6] == ["current", "onnxruntime==1.20.1", "95.00 %", "1", "0", "0.0123"], pair
    details = driver.find_element(By.CSS_SELECTOR, "details summary")
    _tab_to_element(driver, details)
    _keys(driver, Keys.ENTER)
    assert FLIPPED in driver.find_element(By.CSS_SELECTOR, "details").text
    screenshot(driver, "stack-matrix")


def _tab_to_element(driver: WebDriver, element: Any, limit: int = 40) -> None:
    """Tab until ``element`` has the focus."""
    for _ in range(limit):
        _keys(driver, Keys.TAB)
        if driver.switch_to.active_element == element:
            return
    pytest.fail(f"{limit} Tab presses never reached {element.tag_name} on {driver.current_url}")


def test_jobs_page_filters_and_cancels_and_back_after_logout_shows_nothing(service: Service, driver: WebDriver) -> None:
    """Issue 21 items 3 and 6: the /jobs page's status filter and Cancel button (its form's CSRF token) in a real
    browser; after logging out, Back must not show the signed-in page again (Cache-Control: no-store)."""
    from repliscope.store.service_tables import create_job, get_job

    job = create_job(service.store, "bench", MANIFEST_REF, "onnxruntime", DATASET, {}, created_by="browser-runner")
    _login(driver, service, service.runner)
    driver.get(f"{service.url}/jobs")
    _choose(driver, "jobs-filter-status", "queued")
    driver.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]").click()
    poll(lambda: "status=queued" in driver.current_url, timeout=20, what="the filtered jobs page")
    rows = _table(driver, "jobs-table")
    assert [r[0] for r in rows] == [job.id[:12]], f"#jobs-table after status=queued: {rows}"
    assert rows[0][1] == "bench" and rows[0][5] == "queued"
    screenshot(driver, "jobs")
    driver.find_element(By.CSS_SELECTOR, f"form[action='/jobs/{job.id}/cancel'] button").click()
    poll(lambda: get_job(service.store, job.id).status == "cancelled", timeout=20, what="the job cancelled")
    poll(lambda: driver.current_url.rstrip("/").endswith("/jobs"), timeout=20, what="back on /jobs")
    assert "cancelled" in driver.find_element(By.ID, "jobs-table").text

    driver.get(f"{service.url}/jobs")
    driver.find_element(By.CSS_SELECTOR, "form.logout button").click()
    poll(lambda: "/jobs" not in driver.current_url, timeout=20, what="the page after logging out")
    driver.back()
    poll(
        lambda: "/login" in driver.current_url,
        timeout=20,
        what="Back after logging out: the login page, not the cached jobs page",
    )
    assert not driver.find_elements(By.ID, "jobs-table")
