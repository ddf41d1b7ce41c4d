"""The stored-diff pages in a real browser (headless chromium): from the nav's Diffs link to a pipeline diff's page
(verdict, diagnosis, stages with the first divergent one, the heatmap image loaded), at 1280 and 390 px without
sideways scrolling (screenshots in test-artifacts/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.service.browser_support import browser_paths, chromium_driver, live_server, page_images, poll, screenshot

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("uvicorn", reason="the 'service' extra is not installed")
pytest.importorskip("selenium", reason="selenium is not installed (the 'dev' extra)")

from selenium.webdriver.common.by import By

pytestmark = pytest.mark.browser


def test_pipeline_diff_page_in_the_browser(tmp_path: Path) -> None:
    chromium, chromedriver = browser_paths()
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.diffs import store_diff
    from tests.diff.test_diff_service import _pipeline_diff

    app = create_app(ServiceConfig(db_url=f"sqlite:///{tmp_path / 'service.db'}"))
    admin, _ = first_start(app.state.store)
    assert admin is not None
    (tmp_path / "images").mkdir()
    result, png = _pipeline_diff(tmp_path / "images")
    diff_id = store_diff(app.state.store, result, manifest_name="efficientnet-lite0", figure=png)
    try:
        with live_server(app) as url, chromium_driver(chromium, chromedriver) as driver:
            driver.get(f"{url}/login")
            driver.find_element(By.ID, "token").send_keys(admin)
            driver.find_element(By.ID, "login").click()
            poll(lambda: "/login" not in driver.current_url, timeout=20, what="the redirect away from /login")
            driver.find_element(By.CSS_SELECTOR, 'nav a[href="/diffs"]').click()
            poll(lambda: driver.current_url.endswith("/diffs"), timeout=20, what="the diffs page")
            rows = driver.find_elements(By.CSS_SELECTOR, "#diffs-table tbody tr")
            assert len(rows) == 1 and "explained" in rows[0].text
            screenshot(driver, "diffs")
            rows[0].find_element(By.CSS_SELECTOR, "a").click()
            poll(lambda: diff_id in driver.current_url, timeout=20, what="the diff page")
            assert "your pipeline = the manifest with `resize_bilinear`" in driver.find_element(By.ID, "diagnosis").text
            assert driver.find_element(By.ID, "first-divergent").text == "First divergent stage: resize"
            stages = driver.find_elements(By.CSS_SELECTOR, "#stages-table tbody tr.differs")
            assert [r.find_element(By.CSS_SELECTOR, "th").text for r in stages] == [
                "resize",
                "center crop",
                "normalize",
                "to CHW",
            ]
            [image] = [i for i in page_images(driver) if i["alt"] == "heatmap panels of the worst samples"]
            assert image["complete"] and image["width"] == 720 and image["height"] > 0, image
            screenshot(driver, "diff")
    finally:
        app.state.executor.shutdown(wait=True)
        app.state.cluster.close()
