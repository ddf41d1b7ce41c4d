"""The strict page policy (:data:`repliscope.service.guard.PAGE_CSP`) in a real browser: the wizard and a run page
do all their scripted work (the wizard's script now comes from ``/static/wizard.js``) and chromium's console logs
no Content-Security-Policy violation; an inline script injected into the page is refused and logged (the check
sees violations). One chromium session for the module (a few seconds: its start)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from tests.conftest import LITE0

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("uvicorn", reason="the 'service' extra is not installed")
pytest.importorskip("selenium", reason="selenium is not installed (the 'dev' extra)")

pytestmark = pytest.mark.browser

RUN = "e1" * 16
LITE0_REF = "efficientnet-lite0@1.0.0"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    """Chromium signed in as a runner on ``/new``, against a store holding Lite0's manifest and one run."""
    from repliscope.manifest.loader import load_manifest
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.accounts import create_token
    from repliscope.store.manifests import put_manifest
    from tests.service.browser_support import browser_paths, logged_in_browser, served
    from tests.store.records import TOP1_A, make_record

    browser_paths()  # skips with the reason when chromium or chromedriver are absent, before the app starts
    root = tmp_path_factory.mktemp("csp-browser")
    app = create_app(ServiceConfig(db_url=f"sqlite:///{root / 'runs.db'}", cache_dir=root / "cache"))
    store = app.state.store
    first_start(store)
    manifest = load_manifest(LITE0).manifest
    put_manifest(store, manifest.name, manifest.version, LITE0.read_text(encoding="utf-8"), "csp")
    store.save(make_record(RUN, TOP1_A))
    runner = create_token(store, "csp-runner", "runner")
    with served(app) as url, logged_in_browser(url, runner, "/new") as driver:
        yield driver, url


def _violations(driver: Any) -> list[str]:
    """The console messages since the last call that report a Content-Security-Policy refusal."""
    return [e["message"] for e in driver.get_log("browser") if "Content Security Policy" in e["message"]]


def test_the_wizard_and_a_run_page_run_their_scripts_with_no_csp_violation(browser: tuple[Any, str]) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from tests.service.browser_support import at_path, poll

    driver, url = browser
    assert at_path(driver, "/new")
    assert Select(driver.find_element(By.ID, "wizard-manifest")).first_selected_option.get_attribute("value") == (
        LITE0_REF
    )
    variants = driver.find_element(By.ID, "wizard-variants")
    assert not variants.is_displayed()
    Select(driver.find_element(By.ID, "wizard-kind")).select_by_value("pitfalls")  # wizard.js shows its fieldset
    poll(variants.is_displayed, timeout=10, what="#wizard-variants shown by wizard.js for kind pitfalls")
    driver.find_element(By.CSS_SELECTOR, "#upload-details summary").click()  # closed once a manifest is stored
    driver.execute_script("document.getElementById('upload-text').value = '#'.repeat(2000000);")
    driver.find_element(By.ID, "upload-submit").click()  # wizard.js stops it before it is sent
    note = driver.find_element(By.ID, "upload-size-error")
    assert note.is_displayed() and note.text.startswith("the pasted text is 2,000,000 bytes;")
    assert at_path(driver, "/new")
    assert _violations(driver) == []

    for path in (f"/runs/{RUN}", "/runs"):
        driver.get(f"{url}{path}")
        poll(partial(at_path, driver, path), timeout=20, what=path)
        assert driver.execute_script("return document.readyState") == "complete"
        assert _violations(driver) == [], path

    ran = driver.execute_script(
        "var s = document.createElement('script'); s.textContent = 'window.cspInlineRan = true;';"
        "document.body.appendChild(s); return window.cspInlineRan === true;"
    )
    assert ran is False
    refused = poll(
        lambda: _violations(driver), timeout=10, what="chromium's console report of the refused inline script"
    )
    assert len(refused) == 1, refused
    assert "inline script violates" in refused[0] and "'script-src 'self''" in refused[0], refused
    assert refused[0].endswith("The action has been blocked."), refused
