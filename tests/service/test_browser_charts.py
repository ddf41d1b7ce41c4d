"""Issue 36 item 8 (charts) in a real browser (headless chromium + selenium), one session: from the nav's Charts
link to a chart of top-1 by runtime, regrouped by framework version and filtered to one model with the form, a
point clicked to open its run; from a sweep's run page to its parallel coordinates (one line per run), a run
highlighted from the table. Screenshots at 1280 and 390 px (no sideways scrolling; the chart scrolls in its box)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.service.browser_support import (
    at_path,
    browser_paths,
    logged_in_browser,
    poll,
    screenshot,
    served,
)

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("uvicorn", reason="the 'service' extra is not installed")
pytest.importorskip("selenium", reason="selenium is not installed (the 'dev' extra)")

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@dataclass
class Seeded:
    url: str
    viewer: str


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    browser_paths()
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.accounts import create_token
    from tests.report.factories import sweep_records
    from tests.report.test_run_charts import parameter_sweep
    from tests.store.chart_runs import seed

    root = tmp_path_factory.mktemp("browser-charts")
    app = create_app(ServiceConfig(db_url=f"sqlite:///{root / 'runs.db'}"))
    store = app.state.store
    first_start(store)
    seed(store)
    store.save_sweep(parameter_sweep())
    for r in sweep_records().values():
        store.save(r)
    viewer = create_token(store, "chart-viewer", "viewer")
    with served(app) as url:
        yield Seeded(url, viewer)


@pytest.fixture(scope="module")
def driver(seeded: Seeded) -> Iterator[WebDriver]:
    with logged_in_browser(seeded.url, seeded.viewer, "/runs") as d:
        yield d


def test_a_chart_is_regrouped_and_a_point_opens_its_run(seeded: Seeded, driver: WebDriver) -> None:
    from tests.store.chart_runs import MODEL

    driver.find_element(By.LINK_TEXT, "Charts").click()
    poll(lambda: at_path(driver, "/charts"), timeout=20, what="the charts page")
    assert driver.find_element(By.CSS_SELECTOR, "#run-chart-figure svg title").get_attribute("textContent") == (
        "top1 by runtime: 10 runs"  # six of MODEL, four of the factory sweep
    )
    Select(driver.find_element(By.ID, "chart-by")).select_by_value("framework_version")
    driver.find_element(By.CSS_SELECTOR, "#chart-filters summary").click()  # folded while no filter is set
    Select(driver.find_element(By.ID, "chart-model")).select_by_value(MODEL)
    driver.find_element(By.ID, "chart-draw").click()
    poll(lambda: "by=framework_version" in driver.current_url, timeout=20, what="the regrouped chart")
    title = driver.find_element(By.CSS_SELECTOR, "#run-chart-figure svg title").get_attribute("textContent")
    assert title == "top1 by framework version: 6 runs"
    points = driver.find_elements(By.CSS_SELECTOR, "#run-chart-figure svg a.point")
    assert len(points) == 6 and len(driver.find_elements(By.CSS_SELECTOR, "#chart-table tbody tr")) == 6
    claim = driver.find_element(By.CSS_SELECTOR, "#run-chart-figure svg .claims text")
    assert claim.is_displayed() and claim.text == "claim mobilenet-v2 75.10 %"
    screenshot(driver, "charts")
    target = "f1" * 16  # onnxruntime 1.9.0, the first group's one run
    driver.find_element(By.CSS_SELECTOR, f'#run-chart-figure svg a[href="/runs/{target}"] circle').click()
    poll(lambda: at_path(driver, f"/runs/{target}"), timeout=20, what="the clicked point's run page")
    assert target[:12] in driver.find_element(By.TAG_NAME, "main").text


def test_a_sweeps_parallel_coordinates_draw_a_line_per_run(seeded: Seeded, driver: WebDriver) -> None:
    from tests.report.factories import SWEEP_ID, VARIANT_RUN_IDS

    driver.get(f"{seeded.url}/runs/{VARIANT_RUN_IDS['reference']}")
    driver.find_element(By.ID, "sweep-parallel").click()
    poll(lambda: at_path(driver, f"/sweeps/{SWEEP_ID}/parallel"), timeout=20, what="the parallel coordinates")
    lines = driver.find_elements(By.CSS_SELECTOR, "#parallel-figure svg polyline.pc-path")
    assert len(lines) == 4
    assert len(driver.find_elements(By.CSS_SELECTOR, "#parallel-figure svg a.reference")) == 1
    axes = [
        t.get_attribute("textContent") for t in driver.find_elements(By.CSS_SELECTOR, "#parallel-figure .axes > text")
    ]
    assert axes[:1] == ["variant"] and "scale" in axes and "offset" in axes and "top1 (%)" in axes
    screenshot(driver, "sweep-parallel")
    driver.find_element(By.LINK_TEXT, "highlight data_layout_bug").click()
    chosen = VARIANT_RUN_IDS["data_layout_bug"]
    poll(lambda: f"run={chosen}" in driver.current_url, timeout=20, what="the highlighted run")
    link = driver.find_element(By.CSS_SELECTOR, "#parallel-figure svg a.chosen")
    assert link.get_dom_attribute("href") == f"/runs/{chosen}"
    path = link.find_element(By.CSS_SELECTOR, "polyline.pc-path")
    (x0, y0), (x1, y1) = [tuple(map(float, p.split(","))) for p in path.get_dom_attribute("points").split()[:2]]
    box = path.rect  # click the middle of the line's first segment (the box's centre may be off the line)
    left = driver.find_element(By.CSS_SELECTOR, "#parallel-figure svg").rect
    at = (
        (x0 + x1) / 2 + left["x"] - box["x"] - box["width"] / 2,
        (y0 + y1) / 2 + left["y"] - box["y"] - box["height"] / 2,
    )
    ActionChains(driver).move_to_element_with_offset(path, int(at[0]), int(at[1])).click().perform()
    poll(lambda: at_path(driver, f"/runs/{chosen}"), timeout=20, what="the chosen line's run page")
