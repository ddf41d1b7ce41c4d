"""Issue 36 items 2, 8 and 9 on the compare page in a real browser (headless chromium + selenium), one session on a
live server holding two classification runs measured on 2 and 4 threads, and two detection runs of the rect
detector that differ on one image: the compare shows each run's throughput and latency percentiles and says they
are not comparable (threads 2 vs 4); a flipped sample's thumbnail opens larger; a compare of a classification and
a detection run is refused with each run's task and a link to what can be compared; the differing image of two
detection runs shows its boxes by class name, opens larger, and the score threshold redraws them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from repliscope.evaluation.record import EvaluationRecord
from tests.service.browser_support import (
    at_path,
    browser_paths,
    logged_in_browser,
    poll,
    screenshot,
    served,
)
from tests.service.test_compare_tasks_and_timings import detections  # noqa: F401  (fixture)
from tests.store.records import TOP1_A, TOP1_B, make_record

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("uvicorn", reason="the 'service' extra is not installed")
pytest.importorskip("selenium", reason="selenium is not installed (the 'dev' extra)")

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@dataclass
class Seeded:
    url: str
    admin: str
    cls: tuple[EvaluationRecord, EvaluationRecord]
    det: tuple[EvaluationRecord, EvaluationRecord]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory, detections: list[EvaluationRecord]) -> Iterator[Seeded]:  # noqa: F811
    browser_paths()
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start

    root = tmp_path_factory.mktemp("compare-perf")
    a, b = make_record("a5" * 16, TOP1_A), make_record("b5" * 16, TOP1_B)
    b.options["threads"] = 4
    b.timings.batch_latencies_seconds = [0.0412, 0.0398, 0.0405, 0.0951]
    b.timings.loop_seconds, b.timings.throughput_samples_per_second = 0.4, 47.5
    app = create_app(ServiceConfig(db_url=f"sqlite:///{root / 'runs.db'}", cache_dir=root / "cache"))
    admin, _ = first_start(app.state.store)
    assert admin is not None
    for r in (a, b, *detections):
        app.state.store.save(r)
    with served(app) as url:
        yield Seeded(url, admin, (a, b), (detections[0], detections[1]))


@pytest.fixture(scope="module")
def driver(seeded: Seeded) -> Iterator[WebDriver]:
    with logged_in_browser(seeded.url, seeded.admin, "/runs") as d:
        yield d


def _rows(driver: WebDriver, table: str) -> dict[str, list[str]]:
    rows = {}
    for tr in driver.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr"):
        cells = [c.text for c in tr.find_elements(By.CSS_SELECTOR, "th, td")]
        rows[cells[0]] = cells
    return rows


def _opens_larger(driver: WebDriver, link_css: str, back_to: str) -> int:
    """Follow the first ``link_css`` (a thumbnail's link): the larger PNG's longer side; then back."""
    link = driver.find_element(By.CSS_SELECTOR, link_css)
    href = link.get_attribute("href")
    assert href is not None and "size=large" in href
    link.click()
    poll(lambda: "thumbnail.png" in driver.current_url, timeout=20, what="the larger view")
    side = poll(
        lambda: driver.execute_script(
            "const i = document.querySelector('img'); return i && Math.max(i.naturalWidth, i.naturalHeight)"
        ),
        timeout=20,
        what="the larger image to load",
    )
    driver.get(back_to)
    return int(side)


def test_compare_shows_latency_and_throughput_and_flips_open_larger(seeded: Seeded, driver: WebDriver) -> None:
    from repliscope.service.web.samples import LARGE_PX

    a, b = seeded.cls
    page = f"{seeded.url}/compare?a={a.run_id}&b={b.run_id}"
    driver.get(page)
    assert driver.find_element(By.ID, "perf-verdict").text.startswith("not comparable: threads 2 vs 4; timing ")
    timings = _rows(driver, "compare-perf-table")
    assert timings["A"][1:5] == ["10.1 img/s", "310.70 ms", "331.20 ms", "331.20 ms"]
    assert timings["B"][1:5] == ["47.5 img/s", "41.20 ms", "95.10 ms", "95.10 ms"]
    assert _rows(driver, "compare-perf-conditions")["threads"][1:] == ["2", "4", "differs"]
    driver.find_element(By.ID, "compare-perf").location_once_scrolled_into_view  # noqa: B018
    screenshot(driver, "compare-timings")
    assert _opens_larger(driver, "#flips a.thumb-link", page) == LARGE_PX


def test_a_compare_of_mixed_tasks_is_refused_and_points_to_what_compares(seeded: Seeded, driver: WebDriver) -> None:
    (a, b), (det, _) = seeded.cls, seeded.det
    driver.get(f"{seeded.url}/compare?run={a.run_id}&run={det.run_id}&run={b.run_id}")
    reason = driver.find_element(By.ID, "compare-refused-reason").text
    assert reason.startswith("runs of different tasks cannot be compared (image_classification and object_detection)")
    assert f"run {det.run_id[:12]} is object_detection (AP, " in reason
    assert "compare-metrics" not in driver.page_source
    screenshot(driver, "compare-refused")
    driver.find_element(By.LINK_TEXT, "Compare the 2 image_classification runs (A, C)").click()
    poll(lambda: driver.find_elements(By.ID, "perf-verdict"), timeout=20, what="the compare of the two runs")
    assert at_path(driver, "/compare")


def test_detection_boxes_carry_class_names_and_the_threshold(seeded: Seeded, driver: WebDriver) -> None:
    from repliscope.service.web.samples import LARGE_PX

    a, b = seeded.det
    page = f"{seeded.url}/compare?a={a.run_id}&b={b.run_id}"
    driver.get(page)
    first = a.samples[0].sample_id
    row = _rows(driver, "differing-boxes")[first]
    assert row[4].startswith(("red ", "green ", "blue ")) and row[5] == "none"
    thumbs = driver.find_elements(By.CSS_SELECTOR, "#differing-boxes img.thumb")
    assert len(thumbs) == 2 and all("min_score" not in (t.get_attribute("src") or "") for t in thumbs)
    score = driver.find_element(By.ID, "min-score")
    score.clear()
    score.send_keys("0.9", Keys.TAB)
    poll(
        lambda: all("min_score=0.9" in (t.get_attribute("src") or "") for t in thumbs),
        timeout=10,
        what="the thumbnails redrawn from the threshold",
    )
    screenshot(driver, "compare-boxes")
    assert _opens_larger(driver, "#differing-boxes a.thumb-link", page) == LARGE_PX
