"""Issue 36 item 8 in a real browser (headless chromium + selenium): a job started on the service's in-process
executor (Lite0 on torch, 4 foolbox images) is watched on its page until it succeeds, its log a table of timed,
levelled, sourced lines filled in while it runs (no reload); its run's artifacts are opened from the job page and one
is viewed and one downloaded; its whole log downloads as text; a second job held running is cancelled from its page
(a confirmation first) and the page says who cancelled it and when, its Cancel button then disabled."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LITE0
from tests.service.browser_support import (
    at_path,
    browser_paths,
    live_server,
    logged_in_browser,
    poll,
    screenshot,
)

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("uvicorn", reason="the 'service' extra is not installed")
pytest.importorskip("selenium", reason="selenium is not installed (the 'dev' extra)")

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from repliscope.service.executor import ThreadJobExecutor

pytestmark = pytest.mark.browser

JOB_TIMEOUT_S = 300.0
"""Lite0 on torch over 4 images takes a few seconds here; the bound leaves room for a loaded 2-core CI machine."""
RUNNER = "browser-runner"


class HeldExecutor(ThreadJobExecutor):
    """The service's in-process executor; a job submitted while ``hold`` is set waits at each progress step until
    ``release`` is set (so the browser can cancel it while it runs)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold = False
        self.held: set[str] = set()
        self.release = threading.Event()

    def submit(self, job: Any) -> str:
        if self.hold:
            self.held.add(job.job_id)
        return super().submit(job)

    def _progress_callback(self, job_id: str) -> tuple[Callable[[int], None], dict[str, Any]]:
        on_progress, done = super()._progress_callback(job_id)
        if job_id not in self.held:
            return on_progress, done

        def held(n: int) -> None:
            on_progress(n)  # progress written (and a requested cancel raised) first
            self.release.wait(60)

        return held, done


@dataclass
class Seeded:
    url: str
    runner: str
    executor: HeldExecutor
    downloads: Path


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    browser_paths()
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.accounts import create_token
    from repliscope.store.repository import RunStore
    from repliscope.store.service_tables import put_manifest
    from tests.conftest import _session_cache

    root = tmp_path_factory.mktemp("jobs-artifacts")
    url = f"sqlite:///{root / 'runs.db'}"
    cache = _session_cache(tmp_path_factory)  # the session's model cache: Lite0's weights loaded once a session
    jobs_store = RunStore(url)
    executor = HeldExecutor(jobs_store, cache, progress_every=0.0)
    app = create_app(ServiceConfig(db_url=url, cache_dir=cache, executor=executor))
    store = app.state.store
    admin, _ = first_start(store)
    assert admin is not None
    runner = create_token(store, RUNNER, "runner")
    put_manifest(store, "efficientnet-lite0", "1.0.0", LITE0.read_text(encoding="utf-8"), uploaded_by=RUNNER)
    downloads = root / "downloads"
    downloads.mkdir()
    try:
        with live_server(app) as base:
            yield Seeded(base, runner, executor, downloads)
    finally:
        executor.release.set()
        executor.shutdown(wait=True)
        app.state.cluster.close()
        jobs_store.close()


@pytest.fixture(scope="module")
def driver(seeded: Seeded) -> Iterator[WebDriver]:
    with logged_in_browser(seeded.url, seeded.runner, "/jobs", downloads=seeded.downloads) as d:
        yield d


def _submit(seeded: Seeded) -> str:
    import httpx

    r = httpx.post(
        f"{seeded.url}/api/v1/jobs",
        headers={"Authorization": f"Bearer {seeded.runner}"},
        json={
            "kind": "evaluate",
            "manifest": "efficientnet-lite0@1.0.0",
            "runtime": "torch",
            "dataset": "foolbox_imagenet",
            "options": {"limit": 4, "batch_size": 1},
        },
        timeout=60,
    )
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def _status(driver: WebDriver) -> str:
    return str(driver.find_element(By.ID, "job-status").text.strip())


def _log_rows(driver: WebDriver) -> list[list[str]]:
    return [
        [c.text.strip() for c in row.find_elements(By.TAG_NAME, "td")]
        for row in driver.find_elements(By.CSS_SELECTOR, "#job-log tbody tr")
    ]


def _downloaded(seeded: Seeded, name: str) -> Path:
    def done() -> Path | None:
        path = seeded.downloads / name
        return path if path.is_file() and not list(seeded.downloads.glob("*.crdownload")) else None

    return poll(done, timeout=30, what=f"the download {name}")


def test_a_job_is_watched_to_its_end_and_its_artifacts_open(seeded: Seeded, driver: WebDriver) -> None:
    job_id = _submit(seeded)
    driver.get(f"{seeded.url}/jobs/{job_id}")
    seen: list[str] = []

    def finished() -> str | None:
        status = _status(driver)
        if not seen or seen[-1] != status:
            seen.append(status)
        assert status not in ("failed", "cancelled"), driver.find_element(By.TAG_NAME, "main").text[:2000]
        return status if status == "succeeded" else None

    poll(finished, timeout=JOB_TIMEOUT_S, what="the job to succeed on its page", interval=0.3)
    assert seen[0] in ("queued", "running") and len(seen) >= 2, f"the page did not follow the job live: {seen}"
    rows = poll(lambda: _log_rows(driver) or None, timeout=10, what="the log table")
    assert rows[0][1:] == ["info", "service", "evaluate efficientnet-lite0@1.0.0 on torch, dataset foolbox_imagenet"]
    assert all(re.fullmatch(r"\d\d:\d\d:\d\d", r[0]) for r in rows), rows
    assert rows[-1][1] == "info" and re.fullmatch(r"succeeded: stored run [0-9a-f]{32}", rows[-1][3]), rows[-1]
    assert "{" not in "".join(r[3] for r in rows[:-1])  # messages, never the stored JSON
    rate = driver.find_element(By.ID, "job-rate").text
    assert re.match(r"4 of 4 samples, [0-9.e+]+ samples/s\. Started .+ UTC, finished .+ UTC\.", rate), rate
    assert driver.find_element(By.ID, "job-cancel").get_attribute("disabled") is not None
    screenshot(driver, "job-log")

    driver.find_element(By.LINK_TEXT, "its artifacts").click()
    poll(lambda: driver.current_url.endswith("/artifacts"), timeout=20, what="the run's artifacts page")
    run_id = driver.current_url.rsplit("/", 2)[-2]
    names = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#artifacts tbody th code")]
    assert names == ["report.html", "report.md", "samples.csv", "samples.json", "record.json"]
    assert "/tmp" not in driver.find_element(By.TAG_NAME, "main").text
    screenshot(driver, "artifacts")
    driver.find_element(By.CSS_SELECTOR, 'a[aria-label="View Evaluation record (JSON)"]').click()
    poll(lambda: at_path(driver, f"/runs/{run_id}/artifacts/record.json"), timeout=20, what="the record viewed")
    assert f'"run_id": "{run_id}"' in driver.find_element(By.TAG_NAME, "body").text
    driver.back()
    poll(lambda: at_path(driver, f"/runs/{run_id}/artifacts"), timeout=20, what="back on the artifacts page")
    driver.find_element(By.CSS_SELECTOR, 'a[aria-label="Download Samples (CSV: one row per sample)"]').click()
    samples = _downloaded(seeded, f"run-{run_id}-samples.csv")
    lines = samples.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith('"position","sample_id"') or lines[0].startswith("position,sample_id")
    assert len(lines) == 5  # the header and the 4 samples

    driver.get(f"{seeded.url}/jobs/{job_id}")
    driver.find_element(By.ID, "job-log-download").click()
    log = _downloaded(seeded, f"job-{job_id}.log.txt").read_text(encoding="utf-8").splitlines()
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ info    \[service\] evaluate efficientnet-lite0@1\.0\.0 on torch.*", log[0]
    )


def test_a_running_job_is_cancelled_from_its_page(seeded: Seeded, driver: WebDriver) -> None:
    seeded.executor.hold = True
    job_id = _submit(seeded)
    driver.get(f"{seeded.url}/jobs/{job_id}")
    poll(lambda: _status(driver) == "running", timeout=JOB_TIMEOUT_S, what="the held job to run")
    confirm = driver.find_element(By.ID, "job-cancel-confirm")
    assert not confirm.is_displayed()  # behind the confirmation
    driver.find_element(By.ID, "job-cancel").click()
    confirm.click()
    poll(lambda: at_path(driver, f"/jobs/{job_id}"), timeout=20, what="back on the job page")
    note = poll(
        lambda: driver.find_elements(By.ID, "job-cancel-note"), timeout=20, what="the cancel request on the page"
    )
    assert note[0].text.startswith(f"— cancel requested by {RUNNER} at ")
    seeded.executor.release.set()  # the job reaches its next progress step: cancelled there
    started = time.monotonic()
    poll(lambda: _status(driver) == "cancelled", timeout=60, what="the job cancelled, shown live")
    text = driver.find_element(By.ID, "job-cancel-note").text
    assert re.fullmatch(rf"— cancelled by {RUNNER} at \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text), text
    poll(
        lambda: driver.find_element(By.ID, "job-cancel").get_attribute("disabled") is not None,
        timeout=10,
        what="the Cancel button disabled once the job is final",
    )
    levels = {r[3]: r[1] for r in _log_rows(driver)}
    assert levels[f"cancel requested by {RUNNER}"] == "warning" and levels["cancelled"] == "warning"
    assert time.monotonic() - started < 60
    screenshot(driver, "job-cancelled")
