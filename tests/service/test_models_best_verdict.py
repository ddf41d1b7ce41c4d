"""Issue 36 item 4: the models pages show, per (model, runtime, dataset), the best-supported judged verdict, not the
latest: a smoke run on 5 images stored after the judged 20-image run, an older record's wide "consistent" (shown as
not comparable by the claims rule) and a sweep variant judged on a narrower interval must not hide it; among runs
of the same size the narrowest interval wins; each cell names its run, why it was chosen and links the others."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from html import unescape
from typing import Any

import pytest
from fastapi.testclient import TestClient

from repliscope.evaluation.record import ClaimVerdict, EvaluationRecord, result_hash
from tests.service.test_web_pages import assert_accessible, logged_in
from tests.store.records import TOP1_A, TOP1_B, make_record

FULL = "a1" * 16  # 20 samples, judged consistent on a ±1.5 pt interval: the best-supported
FULL_WIDE = "a2" * 16  # 20 samples, judged inconsistent on a ±4 pt interval, newer
SMOKE = "a3" * 16  # 5 samples, not comparable (too few), newer still
OLD_WIDE = "a4" * 16  # 10 samples recorded "consistent" on a ±22 pt interval (the rule before): not judged
VARIANT = "a5" * 16  # a sweep variant judged on a ±0.5 pt interval, the newest: not the model as claimed
TORCH_SMOKE = "b3" * 16  # the only torch run: not comparable
MODEL = "efficientnet-lite0"


def _run(
    run_id: str,
    day: int,
    verdict: str,
    interval: tuple[float, float],
    *,
    samples: int = 20,
    runtime: str = "onnxruntime",
    top1: list[int | None] = TOP1_B,
    variant: str | None = None,
    sampling: str | None = None,
) -> EvaluationRecord:
    record = make_record(
        run_id,
        top1,
        runtime=runtime,
        created_at=datetime(2026, 11, day, 12, 0, tzinfo=UTC),
        variant=variant,
        sweep_id="5e" * 16 if variant else None,
    )
    kept = record.samples[:samples]
    low, high = interval
    claim = ClaimVerdict(
        metric="top1",
        claimed=0.753,
        measured=(low + high) / 2,
        ci_low=low,
        ci_high=high,
        claim_dataset="imagenet-1k/val",
        evaluated_dataset="foolbox_imagenet (as imagenet-1k/val)",
        verdict=verdict,  # type: ignore[arg-type]
        reason=f"{verdict} (test double)",
        source="README.md",
        sampling=sampling,  # type: ignore[arg-type]
    )
    counts = {**record.counts, "total": samples, "evaluated": samples, "failed": 0, "labelled": samples}
    return record.model_copy(
        update={"claims": [claim], "samples": kept, "result_hash": result_hash(kept), "counts": counts}
    )


@pytest.fixture
def stored(service_app: Any) -> Any:
    store = service_app.state.store
    store.save(_run(FULL, 10, "consistent", (0.74, 0.77)))
    store.save(_run(FULL_WIDE, 11, "inconsistent", (0.77, 0.85), top1=[*TOP1_A[:19], TOP1_B[19]]))
    store.save(_run(SMOKE, 12, "not comparable", (0.48, 0.95), samples=5))
    store.save(_run(OLD_WIDE, 13, "consistent", (0.52, 0.96), samples=10))
    store.save(_run(VARIANT, 14, "consistent", (0.75, 0.76), variant="rgb_bgr"))
    store.save(_run(TORCH_SMOKE, 12, "not comparable", (0.48, 0.95), samples=5, runtime="torch"))
    return service_app


def _cells(html: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(runtime, dataset) -> (run id, the cell's text) of the models page."""
    found = re.findall(
        r'<li class="best-cell" data-runtime="([^"]+)" data-dataset="([^"]+)" data-run="([^"]+)">(.*?)</li>',
        html,
        re.S,
    )
    return {
        (rt, ds): (run, re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", body))).strip())
        for rt, ds, run, body in found
    }


def test_the_models_page_shows_the_best_supported_verdict_not_the_latest(stored: Any, tokens: dict[str, str]) -> None:
    web = logged_in(stored, tokens["viewer"])
    html = web.get("/").text
    cells = _cells(html)
    assert set(cells) == {("onnxruntime", "foolbox_imagenet"), ("torch", "foolbox_imagenet")}
    run, text = cells[("onnxruntime", "foolbox_imagenet")]
    assert run == FULL
    assert 'data-verdict="consistent">consistent</span>' in html
    assert text.startswith("onnxruntime · foolbox_imagenet consistent on foolbox_imagenet (as imagenet-1k/val)")
    assert (
        f"From run {FULL[:12]} (1.0.0, AMD EPYC, 2026-11-10 12:00): judged on 20 samples, the most of 4 runs "
        "(the narrowest interval of the 2 with 20) · all 4 runs"
    ) in text
    assert f'href="/runs/{FULL}"' in html
    assert (
        'href="/runs?model=efficientnet-lite0&amp;runtime=onnxruntime&amp;dataset=foolbox_imagenet">all 4 runs' in html
    )
    for hidden in (SMOKE, OLD_WIDE, VARIANT, FULL_WIDE):
        assert hidden not in html
    run, text = cells[("torch", "foolbox_imagenet")]
    assert run == TORCH_SMOKE and "not comparable" in text and text.endswith("its claims were not judged")
    assert_accessible(html)


def test_the_model_page_table_names_each_verdicts_run(stored: Any, tokens: dict[str, str]) -> None:
    html = logged_in(stored, tokens["viewer"]).get(f"/models/{MODEL}").text
    table = re.search(r'<table id="model-verdicts">.*?</table>', html, re.S)
    assert table is not None
    rows = re.findall(r'<tr data-run="([^"]+)">(.*?)</tr>', table.group(0), re.S)
    assert [r for r, _ in rows] == [FULL, TORCH_SMOKE]
    first = re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", rows[0][1])))
    assert "onnxruntime foolbox_imagenet consistent" in first and " 20 " in first
    assert "judged on 20 samples, the most of 4 runs" in first
    assert_accessible(html)


def test_the_api_gives_the_same_best_verdicts(stored: Any, tokens: dict[str, str]) -> None:
    with TestClient(stored) as api:
        r = api.get(f"/api/v1/models/{MODEL}", headers={"Authorization": f"Bearer {tokens['viewer']}"})
    assert r.status_code == 200
    best = {(b["runtime"], b["dataset"]): b for b in r.json()["best"]}
    onnx = best[("onnxruntime", "foolbox_imagenet")]
    assert (onnx["run_id"], onnx["verdict"], onnx["judged"], onnx["samples"], onnx["runs"]) == (
        FULL,
        "consistent",
        True,
        20,
        4,
    )
    assert [(c["verdict"], c["direction"], c["ci_low"], c["ci_high"]) for c in onnx["claims"]] == [
        ("consistent", "within", 0.74, 0.77)
    ]
    torch = best[("torch", "foolbox_imagenet")]
    assert (torch["run_id"], torch["verdict"], torch["judged"]) == (TORCH_SMOKE, "not comparable", False)
    # what the models page showed before: the newest plain run per runtime and hardware
    assert {x["run_id"] for x in r.json()["latest"]} == {OLD_WIDE, TORCH_SMOKE}


def test_the_apis_judged_claims_say_how_their_samples_were_chosen(stored: Any, tokens: dict[str, str]) -> None:
    """``sampling`` of each claim in ``best`` and ``latest``, as ``GET /api/v1/runs/{id}`` gives it (None when no
    interval was judged or the record predates it)."""
    judged = "c1" * 16
    stored.state.store.save(_run(judged, 15, "consistent", (0.74, 0.77), runtime="torch", sampling="selection"))
    with TestClient(stored) as api:
        viewer = {"Authorization": f"Bearer {tokens['viewer']}"}
        model = api.get(f"/api/v1/models/{MODEL}", headers=viewer).json()
        run = api.get(f"/api/v1/runs/{judged}", headers=viewer).json()
    best = {b["runtime"]: b for b in model["best"]}
    latest = {x["run_id"]: x for x in model["latest"]}
    assert [c["sampling"] for c in run["claims"]] == ["selection"]
    assert best["torch"]["run_id"] == judged and [c["sampling"] for c in best["torch"]["claims"]] == ["selection"]
    assert [c["sampling"] for c in latest[judged]["claims"]] == ["selection"]
    assert [c["sampling"] for c in best["onnxruntime"]["claims"]] == [None]  # FULL: stored without it
    assert [c["sampling"] for c in latest[OLD_WIDE]["claims"]] == [None]


def test_without_a_judged_run_the_newest_is_shown_as_not_judged(service_app: Any, tokens: dict[str, str]) -> None:
    store = service_app.state.store
    store.save(_run(SMOKE, 12, "not comparable", (0.48, 0.95), samples=5))
    store.save(_run(OLD_WIDE, 13, "consistent", (0.52, 0.96), samples=10))
    cells = _cells(logged_in(service_app, tokens["viewer"]).get("/").text)
    run, text = cells[("onnxruntime", "foolbox_imagenet")]
    # the older record's wide "consistent" counts as not comparable: neither run judged, the one with more samples
    # is not preferred, the newest is shown
    assert run == OLD_WIDE and "not comparable" in text
    assert text.endswith("no run judged its claims: the newest of 2 runs · all 2 runs")


# --- a real browser ---------------------------------------------------------------------------------------------


@pytest.fixture
def browser(stored: Any, tokens: dict[str, str]) -> Iterator[tuple[Any, str, str]]:
    from tests.service.browser_support import browser_paths, chromium_driver, live_server

    chromium, chromedriver = browser_paths()
    with live_server(stored) as url, chromium_driver(chromium, chromedriver) as driver:
        yield driver, url, tokens["viewer"]


@pytest.mark.browser
def test_the_best_verdict_links_its_run_in_a_browser(browser: tuple[Any, str, str]) -> None:
    """The cell's run link opens the judged run; the page fits 1280 and 390 px (a few seconds: chromium's start)."""
    from selenium.webdriver.common.by import By

    from tests.service.browser_support import poll, screenshot

    driver, url, token = browser
    driver.get(f"{url}/login?next=/")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "login").click()
    poll(lambda: driver.find_elements(By.ID, "models-table"), timeout=20, what="the models page after login")
    cell = driver.find_element(By.CSS_SELECTOR, "li.best-cell[data-runtime='onnxruntime']")
    assert cell.find_element(By.CSS_SELECTOR, "[data-verdict]").text == "consistent"
    assert "judged on 20 samples, the most of 4 runs" in cell.text
    screenshot(driver, "models-best-verdict")
    cell = driver.find_element(By.CSS_SELECTOR, "li.best-cell[data-runtime='onnxruntime']")
    cell.find_element(By.CSS_SELECTOR, f"a[href='/runs/{FULL}']").click()
    poll(lambda: driver.current_url.endswith(f"/runs/{FULL}"), timeout=20, what="the judged run's page")
