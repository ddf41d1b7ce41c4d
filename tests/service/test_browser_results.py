"""Issue 36 item 1 in a real browser (headless chromium + selenium): every result is reached by following links from
the page a user starts on. From the jobs list: a diff job's result opens the diff (not "unknown run id"), a bench
job's the benchmark, a pitfall job's the sweep's reference run; from the nav: the benchmarks list, filtered by
manifest, and a benchmark's page; from a sweep of sixteen runs: the compare, page by page, and the sweep's HTML
report with its visual testing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.service.browser_support import (
    browser_paths,
    logged_in_browser,
    poll,
    screenshot,
    served,
)

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("uvicorn", reason="the 'service' extra is not installed")
pytest.importorskip("selenium", reason="selenium is not installed (the 'dev' extra)")

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

pytestmark = [pytest.mark.browser, pytest.mark.slow]

EXTRA = 12
"""Variant runs added to the factory sweep's four: sixteen runs."""


@dataclass
class Seeded:
    url: str
    admin: str
    jobs: dict[str, str]
    """job kind -> job id"""
    results: dict[str, str]
    """job kind -> its result id"""
    bench: Any


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    browser_paths()
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.diffs import store_diff
    from repliscope.store.service_tables import create_job, update_job
    from tests.diff.test_diff_service import _layer_diff
    from tests.report.factories import LITE0_TOP1, SWEEP_ID, record, sweep, sweep_records
    from tests.service.test_benchmarks_and_result_links import copies, lite0_benchmark

    root = tmp_path_factory.mktemp("results")
    cache = root / "cache"
    cache.mkdir()
    app = create_app(ServiceConfig(db_url=f"sqlite:///{root / 'runs.db'}", cache_dir=cache))
    store = app.state.store
    admin, _ = first_start(store)
    assert admin is not None
    store.save_sweep(sweep())
    for r in sweep_records().values():
        store.save(r)
    for i in range(EXTRA):
        store.save(record(LITE0_TOP1, run_id=f"{i:02d}" + "e" * 30, sweep_id=SWEEP_ID, variant=f"extra_{i:02d}"))
    bench = lite0_benchmark()
    benches = copies(bench, 2, "efficientnet-lite0") + copies(bench, 1, "other-model")
    for b in benches:
        store.save_benchmark(b)
    diff_id = store_diff(store, _layer_diff(), manifest_name="efficientnet-lite0")
    results = {"pitfalls": SWEEP_ID, "bench": benches[1].benchmark_id, "diff": diff_id}
    jobs = {}
    for kind, result in results.items():
        job = create_job(store, kind, "efficientnet-lite0@1.0.0", "onnxruntime", "foolbox_imagenet", {}, created_by="r")
        update_job(store, job.id, status="succeeded", progress_total=20, progress_done=20, result_ids=[result])
        jobs[kind] = job.id
    with served(app) as url:
        yield Seeded(url, admin, jobs, results, benches[1])


@pytest.fixture(scope="module")
def driver(seeded: Seeded) -> Iterator[WebDriver]:
    with logged_in_browser(seeded.url, seeded.admin, "/jobs") as d:
        yield d


def _open_job_result(seeded: Seeded, driver: WebDriver, kind: str) -> None:
    """From the jobs list: the job's page, then its "Open the result" link."""
    driver.get(f"{seeded.url}/jobs")
    driver.find_element(By.CSS_SELECTOR, f'a[href="/jobs/{seeded.jobs[kind]}"]').click()
    poll(lambda: driver.current_url.endswith(f"/jobs/{seeded.jobs[kind]}"), timeout=20, what=f"the {kind} job")
    link = driver.find_element(By.ID, "job-run-link")
    assert link.text == f"Open the result {seeded.results[kind][:12]}"
    link.click()


def test_each_job_kinds_result_opens_its_own_page(seeded: Seeded, driver: WebDriver) -> None:
    _open_job_result(seeded, driver, "diff")
    poll(lambda: "/diffs/" in driver.current_url, timeout=20, what="the diff page")
    assert driver.current_url.endswith(f"/diffs/{seeded.results['diff']}")
    body = driver.find_element(By.TAG_NAME, "main").text
    assert "unknown run id" not in body and seeded.results["diff"][:12] in driver.page_source
    _open_job_result(seeded, driver, "bench")
    poll(lambda: "/benchmarks/" in driver.current_url, timeout=20, what="the benchmark page")
    assert driver.current_url.endswith(f"/benchmarks/{seeded.results['bench']}")
    assert f"Benchmark {seeded.results['bench']}" in driver.find_element(By.TAG_NAME, "main").text
    _open_job_result(seeded, driver, "pitfalls")  # a sweep id: its reference run, which shows the sweep
    poll(lambda: "/runs/" in driver.current_url and "/jobs" not in driver.current_url, timeout=20, what="run")
    assert driver.find_element(By.ID, "pitfalls-table").is_displayed()


def test_the_benchmarks_are_listed_filtered_and_opened_from_the_nav(seeded: Seeded, driver: WebDriver) -> None:
    driver.get(f"{seeded.url}/runs")
    driver.find_element(By.LINK_TEXT, "Benchmarks").click()
    poll(lambda: driver.current_url.endswith("/benchmarks"), timeout=20, what="the benchmarks page")
    assert driver.find_element(By.ID, "benchmarks-total").text == "3 benchmarks; page 1 of 1."
    screenshot(driver, "benchmarks-page")
    driver.find_element(By.CSS_SELECTOR, '#filter-manifest option[value="efficientnet-lite0"]').click()
    driver.find_element(By.CSS_SELECTOR, 'form[aria-label="Filter benchmarks"] button[type="submit"]').click()
    poll(lambda: "manifest=efficientnet-lite0" in driver.current_url, timeout=20, what="the manifest filter")
    links = driver.find_elements(By.CSS_SELECTOR, "a.benchmark-link")
    assert len(links) == 2
    target = seeded.results["bench"]
    driver.find_element(By.CSS_SELECTOR, f'a.benchmark-link[href="/benchmarks/{target}"]').click()
    poll(lambda: driver.current_url.endswith(f"/benchmarks/{target}"), timeout=20, what="a benchmark's page")
    main = driver.find_element(By.TAG_NAME, "main").text
    p90 = seeded.bench.latency.percentiles["p90"].value
    assert f"p90 {p90:.3f}" in main and f"{seeded.bench.throughput_samples_per_second:.1f} samples/s" in main
    assert "Provenance" in main and "single-stream" in main
    screenshot(driver, "benchmark-page")


def test_a_sweep_of_sixteen_is_compared_and_its_report_opened(seeded: Seeded, driver: WebDriver) -> None:
    from tests.report.factories import VARIANT_RUN_IDS

    driver.get(f"{seeded.url}/runs/{VARIANT_RUN_IDS['reference']}")
    link = driver.find_element(By.ID, "compare-sweep")
    assert link.text == "Compare the sweep's 16 runs side by side"
    link.click()
    poll(lambda: "/compare?sweep=" in driver.current_url, timeout=30, what="the sweep's compare")
    rows = driver.find_elements(By.CSS_SELECTOR, "#compare-runs-table tbody tr")
    assert len(rows) == 12 and rows[0].find_elements(By.TAG_NAME, "td")[3].text == "reference"
    assert "16 runs; page 1 of 2" in driver.find_element(By.ID, "sweep-pager").text
    driver.find_element(By.ID, "sweep-next").click()
    poll(lambda: "page=2" in driver.current_url, timeout=30, what="the compare's second page")
    assert len(driver.find_elements(By.CSS_SELECTOR, "#compare-runs-table tbody tr")) == 5
    driver.get(f"{seeded.url}/runs/{VARIANT_RUN_IDS['reference']}")
    driver.find_element(By.ID, "sweep-report").click()
    poll(lambda: driver.current_url.endswith("/report"), timeout=30, what="the sweep's report")
    text = driver.find_element(By.TAG_NAME, "body").text
    assert "pitfall sweep" in text and "Visual testing" in text and "data_layout_bug" in text
