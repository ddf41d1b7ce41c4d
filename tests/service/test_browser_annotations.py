"""Issue 36 item 8 (annotate runs) in a real browser (headless chromium + selenium, one session): a runner tags a run
and writes a note holding HTML (shown as text, its script never runs), then finds the run by its tag in the runs
list's search box and by a tag chip; an admin renames it (the name shows in the list) and deletes it (the
confirmation box must be ticked; the browser lands on /runs with the notice; the run's page is gone; the audit
page lists every change). Screenshots at 1280 and 390 px in ``test-artifacts/``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.service.browser_support import (
    at_path,
    browser_paths,
    chromium_driver,
    live_server,
    poll,
    replaced_while_read,
    screenshot,
)

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("uvicorn", reason="the 'service' extra is not installed")
pytest.importorskip("selenium", reason="selenium is not installed (the 'dev' extra)")

from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from tests.service.test_web_pages import assert_accessible
from tests.store.records import TOP1_A, TOP1_B, make_record

pytestmark = [pytest.mark.browser]

RUN_A = "c3" * 16
RUN_B = "d4" * 16
NOTE = 'Input was BGR <script>document.title="owned"</script>\nfixed in <b>v2</b>'


@dataclass
class Served:
    url: str
    tokens: dict[str, str]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    browser_paths()
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.accounts import create_token

    root = tmp_path_factory.mktemp("annotations-browser")
    app = create_app(ServiceConfig(db_url=f"sqlite:///{root / 'runs.db'}", cache_dir=root))
    store = app.state.store
    admin, _ = first_start(store)
    assert admin is not None
    store.save(make_record(RUN_A, TOP1_A))
    store.save(make_record(RUN_B, TOP1_B, runtime="torch"))
    tokens = {"runner": create_token(store, "rui", "runner"), "admin": admin}
    try:
        with live_server(app) as url:
            yield Served(url, tokens)
    finally:
        app.state.executor.shutdown(wait=True)
        app.state.cluster.close()


@pytest.fixture(scope="module")
def driver(served: Served) -> Iterator[WebDriver]:
    chromium, chromedriver = browser_paths()
    with chromium_driver(chromium, chromedriver) as d:
        yield d


def _login(served: Served, driver: WebDriver, role: str, path: str) -> None:
    driver.delete_all_cookies()
    driver.get(f"{served.url}/login?next={path}")
    driver.switch_to.active_element.send_keys(served.tokens[role], Keys.ENTER)
    poll(lambda: at_path(driver, path), timeout=30, what=f"{path} after logging in as {role}")


def _text(driver: WebDriver, element_id: str) -> str:
    return str(driver.find_element(By.ID, element_id).text)


def _texts(driver: WebDriver, selector: str) -> list[str] | None:
    """The texts of the elements ``selector`` finds; None while the page is being replaced (a stale element)."""
    try:
        return [e.text for e in driver.find_elements(By.CSS_SELECTOR, selector)]
    except WebDriverException as exc:
        if replaced_while_read(exc):
            return None
        raise


def _search_runs(served: Served, driver: WebDriver, text: str) -> list[str]:
    """Type ``text`` into the runs list's search box and apply it: the run ids (12 characters) listed."""
    driver.get(f"{served.url}/runs")
    boxes = driver.find_elements(By.ID, "filters-box")  # the filters may fold away in a <details>
    if boxes and boxes[0].get_attribute("open") is None:
        boxes[0].find_element(By.TAG_NAME, "summary").click()
    search = driver.find_element(By.ID, "filter-search")
    search.clear()
    search.send_keys(text, Keys.ENTER)
    poll(lambda: "search=" in driver.current_url, timeout=20, what="the searched runs list")
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#runs-table tbody th[scope=row] a code")]


def test_a_runner_tags_and_notes_a_run_and_finds_it_by_tag(served: Served, driver: WebDriver) -> None:
    page = f"/runs/{RUN_A}"
    _login(served, driver, "runner", page)
    assert not driver.find_elements(By.ID, "delete-form")  # a runner annotates; an admin deletes
    driver.find_element(By.ID, "add-tags").send_keys("baseline paper:table-3")
    driver.find_element(By.ID, "add-tags-button").click()
    poll(lambda: driver.find_elements(By.ID, "run-tags"), timeout=20, what="the tag chips")
    chips = [li.find_element(By.TAG_NAME, "a").text for li in driver.find_elements(By.CSS_SELECTOR, "#run-tags li")]
    assert chips == ["baseline", "paper:table-3"]
    assert "added by rui" in _text(driver, "run-tags")
    note = driver.find_element(By.ID, "note-text")
    note.clear()
    note.send_keys(NOTE)
    driver.find_element(By.ID, "note-save").click()
    poll(lambda: driver.find_elements(By.ID, "run-note"), timeout=20, what="the saved note")
    assert _text(driver, "run-note") == NOTE  # the markup is text: nothing of it ran or rendered
    assert "owned" not in driver.title and not driver.find_elements(By.CSS_SELECTOR, "#run-note b, #run-note script")
    assert "written by rui" in _text(driver, "run-note-who")
    assert_accessible(driver.page_source)
    screenshot(driver, "run-annotations")
    # the runs list: the search box finds the tag, the note's text, and the Tags column shows the tags
    assert _search_runs(served, driver, "table-3") == [RUN_A[:12]]
    assert _search_runs(served, driver, "fixed in") == [RUN_A[:12]]
    cells = driver.find_elements(By.CSS_SELECTOR, "#runs-table tbody td.runs-tags")
    assert [c.text.split() for c in cells] == [["baseline", "paper:table-3"]]
    screenshot(driver, "runs-tag-search")
    # a tag chip lists the runs carrying it
    driver.get(f"{served.url}{page}")
    driver.find_element(By.LINK_TEXT, "baseline").click()
    poll(lambda: "tag=baseline" in driver.current_url, timeout=20, what="the runs tagged baseline")
    listed = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#runs-table tbody th[scope=row] a code")]
    assert listed == [RUN_A[:12]]
    # removing a chip
    driver.get(f"{served.url}{page}")
    driver.find_element(By.CSS_SELECTOR, 'button[aria-label="Remove tag baseline"]').click()
    poll(lambda: _texts(driver, "#run-tags li a") == ["paper:table-3"], timeout=20, what="the chip removed")


def test_an_admin_renames_and_deletes_a_run(served: Served, driver: WebDriver) -> None:
    page = f"/runs/{RUN_B}"
    _login(served, driver, "admin", page)
    name = driver.find_element(By.ID, "display-name")
    name.clear()
    name.send_keys("torch port, second try")
    driver.find_element(By.ID, "rename-button").click()
    poll(lambda: driver.find_elements(By.ID, "run-display-name"), timeout=20, what="the display name")
    assert _text(driver, "run-display-name").startswith("torch port, second try")
    assert "efficientnet-lite0 1.0.0" in _text(driver, "run-display-name")  # the record's own name stays
    driver.get(f"{served.url}/runs")
    assert "torch port, second try" in driver.find_element(By.ID, "runs-table").text
    # delete: without the box ticked the browser does not send the form
    driver.get(f"{served.url}{page}")
    driver.find_element(By.ID, "delete-button").click()
    assert at_path(driver, page) and driver.find_element(By.ID, "delete-form").is_displayed()
    driver.find_element(By.ID, "delete-confirm").click()
    driver.find_element(By.ID, "delete-button").click()
    poll(lambda: at_path(driver, "/runs"), timeout=20, what="the runs list after the delete")
    notice = _text(driver, "runs-notice")
    assert notice.startswith(f"Run {RUN_B[:12]} (torch port, second try) was deleted by admin")
    assert RUN_B[:12] not in driver.find_element(By.ID, "runs-table").text
    assert_accessible(driver.page_source)
    screenshot(driver, "runs-after-delete")
    driver.get(f"{served.url}{page}")
    assert f"unknown run id '{RUN_B}'" in driver.find_element(By.TAG_NAME, "main").text
    driver.find_element(By.LINK_TEXT, "Audit").click()  # the nav's link, an admin's only
    poll(lambda: at_path(driver, "/audit"), timeout=20, what="the audit page")
    rows = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#audit-table tbody tr")]
    assert rows[0].split()[2:5] == ["admin", "web", "delete"] and "deleted efficientnet-lite0 1.0.0" in rows[0]
    assert [r.split()[4] for r in rows] == ["delete", "rename", "untag", "note", "tag"]
    assert_accessible(driver.page_source)
    screenshot(driver, "audit")
