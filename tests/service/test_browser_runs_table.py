"""Issue 36 items 8 (column chooser) and 9 (runs table width, phone filters, one number format per metric) in a real
browser (headless chromium + selenium), one session for the module: at 1280 px the default columns fit their box
(no sideways scrolling), a column hidden with the chooser stays hidden after a reload and on the next visit
(localStorage), a ``?cols=`` link shows its columns; at 390 px the filters fold into one line, their fields do not
overlap when open, and the table scrolls in a keyboard-reachable box; one AP (0.3254, claimed 0.331) reads the same
on the runs list, the run page and the compare page, and so does a top-1."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.service.browser_support import (
    browser_paths,
    logged_in_browser,
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

RUN_A, RUN_B = "f0" * 16, "f1" * 16
DET_A, DET_B = "d0" * 16, "d1" * 16
RUN_WIDE = "e0" * 16
LONG = "efficientnet-lite0-int8-per-channel-quantised-with-calibration"
"""A long model name: it wraps in its cell instead of widening the table."""
AP_A, AP_B = (0.3254, 0.3101, 0.3402), (0.3187, 0.3033, 0.3339)
"""(value, 95 % low, high) of the two detection runs' AP; their claim is AP 0.331 (as COCOeval prints it)."""


@dataclass
class Seeded:
    url: str
    admin: str


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    """Three classification runs (one of a long-named model, one with the widest cells: unbroken 60-character
    runtime and dataset names, a 64-character tag and an 80-character display name) and two detection runs: the
    rect detector evaluated once on ``synthetic_detection`` (about 2 s, a real detection record with per-class AP
    and samples), stored twice with the AP of a COCO-sized measurement and an AP claim of 0.331."""
    browser_paths()
    from repliscope.datasets.resolve import resolve_dataset
    from repliscope.evaluation.record import ClaimVerdict, MetricValue
    from repliscope.evaluation.run import RunSettings, evaluate, prepare
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from tests.service.test_web_detection import MANIFEST
    from tests.store.records import TOP1_A, TOP1_B, make_record

    root = tmp_path_factory.mktemp("runs-table")
    cache = root / "cache"
    cache.mkdir()
    app = create_app(ServiceConfig(db_url=f"sqlite:///{root / 'runs.db'}", cache_dir=cache))
    store = app.state.store
    admin, _ = first_start(store)
    assert admin is not None
    store.save(make_record(RUN_A, TOP1_A))
    b = make_record(RUN_B, TOP1_B, runtime="opencv_dnn")
    store.save(b.model_copy(update={"manifest": b.manifest.model_copy(update={"name": LONG})}))
    # the widest cells a run can bring: unbroken dataset and runtime names, a 64-character tag, a long name
    wide = make_record(RUN_WIDE, TOP1_A, runtime="onnxruntime_" + "x" * 40)
    store.save(wide.model_copy(update={"dataset": {**wide.dataset, "name": "imagenet_validation_" + "y" * 40}}))
    store.annotations.add_tags(RUN_WIDE, ["t" * 64, "baseline"], "admin", "cli")
    store.annotations.rename(RUN_WIDE, "a-display-name-of-eighty-characters-" + "z" * 44, "admin", "cli")
    settings = RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=cache)
    detected = evaluate(prepare(MANIFEST, settings), resolve_dataset("synthetic_detection"))
    on = str(detected.dataset["name"])
    for run_id, (value, low, high) in ((DET_A, AP_A), (DET_B, AP_B)):
        ap = MetricValue(name="AP", value=value, ci_low=low, ci_high=high, n=len(detected.samples))
        claim = ClaimVerdict(
            metric="AP",
            claimed=0.331,
            measured=value,
            ci_low=low,
            ci_high=high,
            claim_dataset=on,
            evaluated_dataset=on,
            verdict="consistent",
            reason="the claimed AP lies inside the 95 % interval",
            source="the model card",
            direction="within",
            sampling="whole split",
        )
        metrics = [ap, *(m for m in detected.metrics if m.name != "AP")]
        store.save(detected.model_copy(update={"run_id": run_id, "metrics": metrics, "claims": [claim]}))
    with served(app) as url:
        yield Seeded(url, admin)


@pytest.fixture(scope="module")
def driver(seeded: Seeded) -> Iterator[WebDriver]:
    with logged_in_browser(seeded.url, seeded.admin, "/runs") as d:
        yield d


TABLE_FITS = """
const t = document.getElementById('runs-table'), box = t.parentElement;
const right = box.getBoundingClientRect().right;
const heads = [...t.querySelectorAll('thead th')].filter(h => h.offsetParent !== null);
return {table: t.scrollWidth, box: box.clientWidth, page: document.documentElement.scrollWidth,
        past: heads.filter(h => h.getBoundingClientRect().right > right + 0.5).map(h => h.textContent.trim())};
"""


def _shown_heads(driver: WebDriver) -> list[str]:
    heads = driver.find_elements(By.CSS_SELECTOR, "#runs-table thead th[data-col]")
    return [h.get_attribute("data-col") or "" for h in heads if h.is_displayed()]


def _cols_of(driver: WebDriver) -> list[str] | None:
    values = parse_qs(urlsplit(driver.current_url).query, keep_blank_values=True).get("cols")
    return None if values is None else values[0].split(",")


def _load(driver: WebDriver, url: str, width: int) -> None:
    set_width(driver, width)
    driver.get(url)
    poll(lambda: driver.find_elements(By.ID, "runs-table"), timeout=20, what=f"the runs table at {url}")


DEFAULT_SHOWN = ["date", "model", "variant", "runtime", "dataset", "samples", "metric", "verdict", "hash", "tags"]


def test_the_default_columns_fit_1280_and_the_chooser_keeps_its_choice(seeded: Seeded, driver: WebDriver) -> None:
    _load(driver, f"{seeded.url}/runs", 1280)
    driver.execute_script("window.localStorage.clear()")
    _load(driver, f"{seeded.url}/runs", 1280)
    fits = driver.execute_script(TABLE_FITS)
    assert fits["table"] <= fits["box"] and fits["past"] == [], fits  # was 1639 px in a 1192 px box
    assert fits["box"] == 1192 and fits["page"] <= 1280
    assert _shown_heads(driver) == DEFAULT_SHOWN
    intervals = driver.find_elements(By.CSS_SELECTOR, "#runs-table tbody .interval")
    assert intervals and all(i.is_displayed() for i in intervals)  # under the metric, on screen
    # the chooser: untick Model, the column goes at once; the address and the kept choice follow
    driver.find_element(By.CSS_SELECTOR, "#columns-chooser summary").click()
    driver.find_element(By.ID, "col-model").click()
    poll(lambda: "model" not in _shown_heads(driver), timeout=10, what="the Model column hidden")
    assert not any(c.is_displayed() for c in driver.find_elements(By.CSS_SELECTOR, 'td[data-col="model"]'))
    chosen = [c for c in DEFAULT_SHOWN if c != "model"]
    expect = [*chosen[:6], "interval", *chosen[6:]]
    assert _cols_of(driver) == expect
    assert driver.execute_script("return localStorage.getItem('repliscope.runs.columns')") == ",".join(expect)
    sort = driver.find_element(By.CSS_SELECTOR, '#runs-table thead th[data-col="runtime"] a').get_attribute("href")
    assert parse_qs(urlsplit(sort or "").query)["cols"] == [",".join(expect)]  # a sort keeps the columns
    driver.refresh()
    poll(lambda: driver.find_elements(By.ID, "runs-table"), timeout=20, what="the reloaded runs page")
    assert "model" not in _shown_heads(driver)
    _load(driver, f"{seeded.url}/runs", 1280)  # the next visit, no cols in the address: the kept choice
    poll(lambda: "model" not in _shown_heads(driver), timeout=10, what="the kept choice applied")
    assert _shown_heads(driver) == chosen and _cols_of(driver) == expect
    # a link reproduces a view: exactly its columns, the kept choice untouched
    _load(driver, f"{seeded.url}/runs?cols=model,metric", 1280)
    assert _shown_heads(driver) == ["model", "metric"]
    assert not driver.find_element(By.CSS_SELECTOR, "#runs-table tbody .interval").is_displayed()
    assert driver.execute_script("return localStorage.getItem('repliscope.runs.columns')") == ",".join(expect)
    # every column back on: still no sideways scrolling of the page (the table scrolls in its box)
    everything = "date,kind,model,variant,runtime,hardware,dataset,samples,metric,interval,verdict,manifest,hash,tags"
    _load(driver, f"{seeded.url}/runs?cols={everything}", 1280)
    assert len(_shown_heads(driver)) == 13
    assert driver.execute_script("return document.documentElement.scrollWidth") <= 1280
    driver.find_element(By.CSS_SELECTOR, "#columns-chooser summary").click()
    driver.find_element(By.ID, "col-kind").click()
    poll(lambda: "kind" not in _shown_heads(driver), timeout=10, what="the Kind column hidden")
    driver.find_element(By.ID, "columns-default").click()  # back to the defaults, kept choice forgotten
    poll(lambda: _cols_of(driver) is not None and "kind" not in (_cols_of(driver) or []), timeout=20, what="defaults")
    assert driver.execute_script("return localStorage.getItem('repliscope.runs.columns')") is None
    assert _shown_heads(driver) == DEFAULT_SHOWN
    driver.find_element(By.CSS_SELECTOR, "#columns-chooser summary").click()  # the chooser open in the picture
    screenshot(driver, "runs-columns")


OVERLAPS = """
const box = document.getElementById('filters-box');
const ctrls = [...box.querySelectorAll('input:not([type=hidden]), select, button')];
const r = ctrls.map(c => [c.id || c.name || c.tagName, c.getBoundingClientRect()]);
const out = [];
for (let i = 0; i < r.length; i++) for (let j = i + 1; j < r.length; j++) {
  const a = r[i][1], b = r[j][1];
  if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5)
    out.push(r[i][0] + ' x ' + r[j][0]);
}
return {overlaps: out, count: ctrls.length, width: Math.max(...r.map(x => x[1].right))};
"""


def test_at_390_the_filters_fold_do_not_overlap_and_the_table_scrolls_by_keyboard(
    seeded: Seeded, driver: WebDriver
) -> None:
    _load(driver, f"{seeded.url}/runs", 390)
    box = driver.find_element(By.ID, "filters-box")
    assert box.get_attribute("open") is None
    height = driver.execute_script("return [arguments[0].getBoundingClientRect().height, innerHeight]", box)
    assert height[0] <= 0.5 * height[1] and height[0] < 60, height  # one line: was 1.4 screens
    # the table scrolls inside its own box, which the keyboard reaches (tab stop) and scrolls (arrow keys)
    scroll = driver.find_element(By.CSS_SELECTOR, "div.scroll:has(> #runs-table)")
    sizes = driver.execute_script("return [arguments[0].scrollWidth, arguments[0].clientWidth]", scroll)
    assert sizes[0] > sizes[1] and scroll.get_attribute("tabindex") == "0", sizes
    assert scroll.get_attribute("role") == "region" and scroll.get_attribute("aria-label") == "Stored runs"
    driver.execute_script("arguments[0].focus()", scroll)
    assert driver.switch_to.active_element == scroll
    scroll.send_keys(Keys.ARROW_RIGHT, Keys.ARROW_RIGHT)
    poll(lambda: driver.execute_script("return arguments[0].scrollLeft", scroll) > 0, timeout=10, what="a scroll")
    assert driver.execute_script("return document.documentElement.scrollWidth") <= 390
    # a filter active: the box opens, and no two of its fields' controls overlap (the search box did a select)
    _load(driver, f"{seeded.url}/runs?runtime=onnxruntime&search=lite0", 390)
    box = driver.find_element(By.ID, "filters-box")
    assert box.get_attribute("open") == "true"
    assert box.find_element(By.TAG_NAME, "summary").text == "Filters and sort (2 active)"
    laid = driver.execute_script(OVERLAPS)
    assert laid["count"] >= 12 and laid["overlaps"] == [] and laid["width"] <= 390, laid
    screenshot(driver, "runs-filters-phone", widths=(390,))


def _cell(driver: WebDriver, table: str, row: str, column: int) -> str:
    """The text of ``column`` in the row of ``table`` whose first cell is ``row``."""
    for tr in driver.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr"):
        cells = tr.find_elements(By.CSS_SELECTOR, "th, td")
        if cells and cells[0].text.strip() == row:
            return str(cells[column].text.strip())
    pytest.fail(f"no row {row!r} in #{table}")


def test_one_ap_and_one_top1_read_the_same_on_every_page(seeded: Seeded, driver: WebDriver) -> None:
    _load(driver, f"{seeded.url}/runs?cols=metric,interval", 1280)
    rows = {
        tr.find_element(By.TAG_NAME, "th").text.strip(): tr.find_element(By.CSS_SELECTOR, 'td[data-col="metric"]')
        for tr in driver.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr")
    }
    assert rows[DET_A[:12]].text.split("\n") == ["AP 0.3254", "[0.3101, 0.3402]"]
    assert rows[RUN_B[:12]].text.split("\n") == ["top1 95.00 %", "[76.39, 99.11] %"]
    # the run page: the metrics table and the claim, the claim in the metric's format (not 33.10 %)
    _load_run = f"{seeded.url}/runs/{DET_A}"
    driver.get(_load_run)
    poll(lambda: driver.find_elements(By.ID, "metrics-table"), timeout=30, what="the detection run page")
    assert _cell(driver, "metrics-table", "AP", 1) == "0.3254"
    assert _cell(driver, "metrics-table", "AP", 2) == "[0.3101, 0.3402]"
    claim = driver.find_element(By.XPATH, "//table[caption='Published claims against the measurement']/tbody/tr")
    cells = [c.text.strip() for c in claim.find_elements(By.TAG_NAME, "td")]
    assert cells[:4] == ["AP", "0.3310", "0.3254", "[0.3101, 0.3402]"]
    driver.get(f"{seeded.url}/runs/{RUN_B}")
    poll(lambda: driver.find_elements(By.ID, "metrics-table"), timeout=30, what="the classification run page")
    assert _cell(driver, "metrics-table", "top1", 1) == "95.00 %"
    assert _cell(driver, "metrics-table", "top1", 2) == "[76.39, 99.11] %"
    # compare: the same value and interval, the difference in the same unit
    driver.get(f"{seeded.url}/compare?a={DET_A}&b={DET_B}")
    poll(lambda: driver.find_elements(By.ID, "compare-table"), timeout=60, what="the detection compare")
    assert [_cell(driver, "compare-table", "AP", i) for i in (1, 2, 3, 5)] == [
        "0.3254",
        "[0.3101, 0.3402]",
        "0.3187",
        "-0.0067",
    ]
    assert _cell(driver, "compare-metrics", "A", 1) == "0.3254"  # the metrics across the runs: AP first
    driver.get(f"{seeded.url}/compare?a={RUN_A}&b={RUN_B}")
    poll(lambda: driver.find_elements(By.ID, "compare-table"), timeout=60, what="the classification compare")
    assert [_cell(driver, "compare-table", "top1", i) for i in (3, 4, 5)] == ["95.00 %", "[76.39, 99.11] %", "+5.53 pp"]
