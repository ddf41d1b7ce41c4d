"""Browsing in a real browser (headless chromium + selenium, issue 21 item 7): the login field focused on load,
the runs table sorted by clicking its headers and searched, runs ticked and compared (N runs: metrics table and
chart), the run page at 390 px with its verdict above the fold and readable charts, every misclassified sample
paged with lazily loaded thumbnails, detection thumbnails with boxes, segmentation masks side by side on the
compare page, the wizard's placeholders not clipped.

The data is real: EfficientNet-Lite0 on torch with a pitfall sweep (reference + 3 variants) on the 20 foolbox
images, the rect detector on ``synthetic_detection``, the colour segmenter on a VOC folder; a stored pipeline diff
and four jobs. Screenshots of every page go to ``test-artifacts/``; with ``REPLISCOPE_DOCS_SCREENSHOTS=1`` the
run, compare-N, diff and jobs pages at 1280 px are also written to ``docs/images/`` (the service guide shows them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import LITE0
from tests.service.browser_support import (
    REPO,
    browser_paths,
    docs_image,
    logged_in_browser,
    page_images,
    poll,
    screenshot,
    served,
    set_width,
)

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("uvicorn", reason="the 'service' extra is not installed")
pytest.importorskip("selenium", reason="selenium is not installed (the 'dev' extra)")

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = [pytest.mark.browser, pytest.mark.slow]

VARIANTS = ["resize_nearest", "no_center_crop", "color_layout_swapped"]
PHONE = (390, 844)
"""A phone's viewport (CSS px): the fold is at 844."""


@dataclass
class Seeded:
    url: str
    admin: str
    runs: dict[str, str]
    """variant name (``reference`` too) -> run id of the Lite0 sweep."""
    sweep_id: str
    detection: str
    segmentation: list[str]
    diff_id: str
    store: Any


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    chromium, chromedriver = browser_paths()
    from repliscope.datasets.resolve import resolve_dataset
    from repliscope.evaluation.run import RunSettings, evaluate, prepare
    from repliscope.pitfalls.sweep import run_sweep
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.diffs import store_diff
    from repliscope.store.service_tables import create_job, update_job
    from tests.diff.test_diff_service import _pipeline_diff
    from tests.segmentation._data import write_voc

    root = tmp_path_factory.mktemp("browsing")
    cache = root / "cache"
    cache.mkdir()
    app = create_app(ServiceConfig(db_url=f"sqlite:///{root / 'runs.db'}", cache_dir=cache))
    store = app.state.store
    admin, _ = first_start(store)
    assert admin is not None
    settings = RunSettings(runtime="torch", threads=1, batch_size=4, cache_dir=cache)
    sweep = run_sweep(prepare(LITE0, settings), resolve_dataset("foolbox_imagenet"), VARIANTS, visual_samples=1)
    for record in sweep.records:
        store.save(record)
    store.save_sweep(sweep.result)
    runs = {str(r.variant or "reference"): r.run_id for r in sweep.records}
    rect = REPO / "tests" / "fixtures" / "detection" / "rect-detector.yaml"
    one = RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=cache)
    detection = evaluate(prepare(rect, one), resolve_dataset("synthetic_detection"))
    store.save(detection)
    segmenter = REPO / "tests" / "fixtures" / "segmentation" / "colour-segmenter.yaml"
    voc = resolve_dataset(f"voc_seg:{write_voc(root / 'voc')}")
    seg_prepared = prepare(segmenter, one)
    segmentation = [evaluate(seg_prepared, voc), evaluate(seg_prepared, voc)]
    for record in segmentation:
        store.save(record)
    (root / "images").mkdir()
    result, png = _pipeline_diff(root / "images")
    diff_id = store_diff(store, result, manifest_name="efficientnet-lite0", figure=png)
    ref = "efficientnet-lite0@1.0.0"
    job_ids = [
        create_job(store, kind, ref, "torch", "foolbox_imagenet", {}, created_by=user).id
        for kind, user in (("pitfalls", "alice"), ("diff", "alice"), ("evaluate", "bob"), ("bench", "bob"))
    ]
    update_job(
        store, job_ids[0], status="succeeded", progress_total=80, progress_done=80, result_ids=[sweep.result.sweep_id]
    )
    update_job(store, job_ids[1], status="succeeded", progress_total=4, progress_done=4, result_ids=[diff_id])
    update_job(store, job_ids[2], status="running", progress_total=20, progress_done=7)
    with served(app) as url:
        yield Seeded(
            url,
            admin,
            runs,
            sweep.result.sweep_id,
            detection.run_id,
            [r.run_id for r in segmentation],
            diff_id,
            store,
        )
        _ = (chromium, chromedriver)


@pytest.fixture(scope="module")
def driver(seeded: Seeded) -> Iterator[WebDriver]:
    with logged_in_browser(seeded.url, seeded.admin, "/runs") as d:
        yield d


_docs_copy = docs_image


def _thumbs_loaded(driver: WebDriver) -> list[dict[str, Any]]:
    """The page's lazy thumbnails, loaded now (a lazy image loads only near the viewport)."""
    driver.execute_script("for (const i of document.querySelectorAll('img.thumb')) { i.loading = 'eager'; }")
    poll(
        lambda: driver.execute_script("return [...document.querySelectorAll('img.thumb')].every(i => i.complete)"),
        timeout=60,
        what="the thumbnails",
    )
    return [i for i in page_images(driver) if "thumb" in i["classes"]]


def _column(driver: WebDriver, index: int) -> list[str]:
    return [
        r.find_elements(By.CSS_SELECTOR, "th, td")[index].text
        for r in driver.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr")
    ]


def test_sort_by_header_search_and_compare_three_runs(seeded: Seeded, driver: WebDriver) -> None:
    driver.get(f"{seeded.url}/runs")
    driver.find_element(By.LINK_TEXT, "Metric").click()
    poll(lambda: "sort=-metric" in driver.current_url, timeout=20, what="the metric sort")
    top1 = _column(driver, 9)
    values = [float(t.split()[1]) for t in top1 if t.startswith("top1 ")]
    assert values == sorted(values, reverse=True) and len(values) == 4  # the 4 Lite0 runs, best first
    driver.find_element(By.LINK_TEXT, "Metric").click()  # again: ascending
    poll(lambda: "sort=metric" in driver.current_url, timeout=20, what="the ascending metric sort")
    assert [float(t.split()[1]) for t in _column(driver, 9) if t.startswith("top1 ")] == sorted(values)
    header = driver.find_element(By.XPATH, "//th[a[normalize-space()='Metric']]")
    assert header.get_attribute("aria-sort") == "ascending"
    driver.find_element(By.CSS_SELECTOR, "#filters-box summary").click()  # the filters fold until opened
    box = driver.find_element(By.ID, "filter-search")
    box.send_keys("nearest", Keys.ENTER)
    poll(lambda: "search=nearest" in driver.current_url, timeout=20, what="the search")
    assert _column(driver, 4) == ["resize_nearest"] and "sort=metric" in driver.current_url  # the sort is kept
    driver.get(f"{seeded.url}/runs?sort=variant")
    _docs_copy(screenshot(driver, "runs-page"), "service-runs")
    for name in ("reference", "resize_nearest", "no_center_crop"):
        driver.find_element(By.ID, f"pick-{seeded.runs[name][:12]}").click()
    driver.find_element(By.ID, "compare-chosen").click()
    poll(lambda: "/compare?" in driver.current_url, timeout=30, what="the compare page")
    assert driver.current_url.count("run=") == 3
    letters = [
        r.find_element(By.CSS_SELECTOR, "th").text
        for r in driver.find_elements(By.CSS_SELECTOR, "#compare-metrics tbody tr")
    ]
    assert letters == ["A", "B", "C"]
    runs = driver.find_elements(By.CSS_SELECTOR, "#compare-runs-table tbody tr")
    assert [r.find_elements(By.CSS_SELECTOR, "td")[3].text for r in runs] == [
        "no_center_crop",  # the table's order (sorted by variant name)
        "reference",
        "resize_nearest",
    ]
    [chart] = [i for i in page_images(driver) if "chart" in i["classes"]]
    assert chart["complete"] and chart["width"] == 640 and chart["height"] > 200
    differs = driver.find_elements(By.CSS_SELECTOR, "#pipeline-across tbody tr.differs")
    assert len(differs) >= 2  # the crop and the resize interpolation
    _docs_copy(screenshot(driver, "compare-n"), "service-compare-n")


def test_run_page_at_phone_width_verdict_above_the_fold_readable_charts(seeded: Seeded, driver: WebDriver) -> None:
    driver.get(f"{seeded.url}/runs/{seeded.runs['resize_nearest']}")
    set_width(driver, *PHONE)
    driver.execute_script("window.scrollTo(0, 0)")
    bottom = driver.execute_script("return document.getElementById('verdict').getBoundingClientRect().bottom")
    assert 0 < bottom < PHONE[1], f"the verdict ends at {bottom} px, below the fold at {PHONE[1]}"
    scales = driver.execute_script(
        "return [...document.querySelectorAll('img.chart')].map(i => i.getBoundingClientRect().width / i.naturalWidth)"
    )
    assert scales and min(scales) >= 0.6, scales  # chart text at least 60 % of its size, not ~40 %
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    pitfalls = driver.find_elements(By.CSS_SELECTOR, "#pitfalls-table tbody tr")
    assert len(pitfalls) == 1 + len(VARIANTS)
    driver.get(f"{seeded.url}/runs/{seeded.runs['reference']}?show=all")
    rows = driver.find_elements(By.CSS_SELECTOR, "#samples-table tbody tr")
    assert len(rows) == 20
    assert driver.find_element(By.CSS_SELECTOR, "img.thumb").get_attribute("loading") == "lazy"
    thumbs = _thumbs_loaded(driver)
    assert len(thumbs) == 20 and all(t["complete"] and max(t["width"], t["height"]) == 160 for t in thumbs)
    _docs_copy(screenshot(driver, "run-page"), "service-run")


def test_detection_thumbnails_show_the_boxes(seeded: Seeded, driver: WebDriver) -> None:
    driver.get(f"{seeded.url}/runs/{seeded.detection}")
    imgs = driver.find_elements(By.CSS_SELECTOR, "img.thumb[data-truth-boxes]")
    assert len(imgs) == 16
    record = seeded.store.get(seeded.detection)
    for img in imgs:
        position = int(str(img.get_attribute("src")).split("/samples/")[1].split("/")[0])
        truth = int(str(img.get_attribute("data-truth-boxes")))
        assert truth == len(record.ground_truth.samples[position].boxes) > 0
    loaded = _thumbs_loaded(driver)
    assert all(i["complete"] and i["width"] > 0 for i in loaded)
    screenshot(driver, "run-detection")


def test_segmentation_compare_shows_masks_side_by_side(seeded: Seeded, driver: WebDriver) -> None:
    a, b = seeded.segmentation
    driver.get(f"{seeded.url}/compare?run={a}&run={b}")
    overlays = [i for i in page_images(driver) if "overlay" in i["classes"]]
    assert len(overlays) == 2 * len(driver.find_elements(By.CSS_SELECTOR, "#compare-masks h3")) > 0
    assert all(o["complete"] and o["width"] > 0 for o in overlays)
    assert driver.find_element(By.ID, "mcnemar").text.startswith("Paired on the 4 images both evaluated")
    screenshot(driver, "compare-masks")


def test_the_wizard_placeholders_fit_their_fields(seeded: Seeded, driver: WebDriver) -> None:
    driver.get(f"{seeded.url}/new")
    for width in (1280, PHONE[0]):
        set_width(driver, width)
        clipped = driver.execute_script(
            """
            const ctx = document.createElement('canvas').getContext('2d');
            return [...document.querySelectorAll('input[placeholder]')].filter(i => i.offsetParent !== null).map(i => {
              const s = getComputedStyle(i);
              ctx.font = s.font;
              const room = i.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
              return [i.id, ctx.measureText(i.placeholder).width, room];
            }).filter(([id, need, room]) => need > room);
            """
        )
        assert clipped == [], f"placeholders clipped at {width} px: {clipped}"
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_screenshots_of_the_diff_and_jobs_pages(seeded: Seeded, driver: WebDriver) -> None:
    driver.get(f"{seeded.url}/diffs/{seeded.diff_id}")
    assert driver.find_element(By.ID, "first-divergent").text == "First divergent stage: resize"
    _docs_copy(screenshot(driver, "diff-page"), "service-diff")
    driver.get(f"{seeded.url}/jobs")
    rows = driver.find_elements(By.CSS_SELECTOR, "table tbody tr")
    assert len(rows) == 4
    _docs_copy(screenshot(driver, "jobs-page"), "service-jobs")
