"""The web UI on object-detection runs (the rect detector of tests/fixtures/detection on ``synthetic_detection``):
the run page shows COCO AP metrics and the per-class table; the compare page of onnxruntime vs opencv_dnn shows the
detection paired figures (matched fraction, mean IoU, ΔAP) and never talks about top-1 or McNemar."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from repliscope.evaluation.record import EvaluationRecord
from tests.service.test_web_pages import a11y, logged_in, parse

MANIFEST = Path(__file__).resolve().parents[1] / "fixtures" / "detection" / "rect-detector.yaml"


@pytest.fixture(scope="module")
def detection_runs(tmp_path_factory: pytest.TempPathFactory) -> list[EvaluationRecord]:
    from repliscope.datasets.resolve import resolve_dataset
    from repliscope.evaluation.run import RunSettings, evaluate, prepare

    cache = tmp_path_factory.mktemp("cache")
    ds = resolve_dataset("synthetic_detection")
    return [
        evaluate(prepare(MANIFEST, RunSettings(runtime=rt, threads=1, batch_size=1, cache_dir=cache)), ds)
        for rt in ("onnxruntime", "opencv_dnn")
    ]


@pytest.fixture
def client(service_app: Any, tokens: dict[str, str], detection_runs: list[EvaluationRecord]) -> TestClient:
    for r in detection_runs:
        service_app.state.store.save(r)
    return logged_in(service_app, tokens["viewer"])


def test_detection_run_page_shows_ap_and_the_per_class_table(
    client: TestClient, detection_runs: list[EvaluationRecord]
) -> None:
    r = client.get(f"/runs/{detection_runs[0].run_id}")
    assert r.status_code == 200
    metrics = {row[0]: row for row in parse(r.text).tables["metrics-table"].rows}
    assert metrics["AP"][1].startswith("1.0") and "AP50" in metrics and "top1" not in metrics
    assert "Per-class AP" in r.text and "green" in r.text
    assert "<h2>Images</h2>" in r.text and "misclassified" not in r.text  # no top-1 notion for boxes


def test_detection_compare_shows_paired_detection_figures_not_top1(
    client: TestClient, detection_runs: list[EvaluationRecord]
) -> None:
    a, b = detection_runs
    r = client.get(f"/compare?a={a.run_id}&b={b.run_id}")
    assert r.status_code == 200
    text = a11y(r.text).text_of("mcnemar")
    assert (
        "Paired over the 16 images both evaluated: B matched 100.0 % of A's 33 detections (IoU >= 0.5, same "
        "class), mean IoU 1.0000, images with differing detections: 0; AP 1.0000 -> 1.0000, ΔAP +0.0000 "
        "(95 % paired bootstrap [0.0000, 0.0000])."
    ) in text
    assert "McNemar" not in r.text and "top-1" not in r.text and "top-k" not in r.text
    assert "Images with differing detections (0)" in r.text
    why = a11y(r.text).text_of("compare-why")
    assert "same detections on every image" in why and "runtime.runtime" in why
    rows = {row[0]: row for row in parse(r.text).tables["compare-table"].rows}
    assert rows["AP"][5] == "+0.0000" and rows["AP"][8] == "+0.0000"


def test_detection_compare_lists_the_images_whose_detections_differ(
    service_app: Any, tokens: dict[str, str], detection_runs: list[EvaluationRecord]
) -> None:
    a = detection_runs[0]
    first = a.samples[0]
    assert first.detections
    samples = [first.model_copy(update={"detections": first.detections[1:]}), *a.samples[1:]]
    b = a.model_copy(update={"run_id": "d1" * 16, "samples": samples, "result_hash": "0" * 64})
    service_app.state.store.save(a)
    service_app.state.store.save(b)
    r = logged_in(service_app, tokens["viewer"]).get(f"/compare?a={a.run_id}&b={b.run_id}")
    assert r.status_code == 200
    assert "images with differing detections: 1" in a11y(r.text).text_of("mcnemar")
    assert a11y(r.text).text_of("differing-images").strip() == str(first.sample_id)
    assert "1 image has differing detections." in a11y(r.text).text_of("compare-why")


def test_a_detection_sweep_variant_shows_ap_and_the_paired_delta_ap_not_top1(
    service_app: Any, tokens: dict[str, str], tmp_path: Path
) -> None:
    from repliscope.datasets.resolve import resolve_dataset
    from repliscope.evaluation.run import RunSettings, prepare
    from repliscope.pitfalls.sweep import run_sweep

    prepared = prepare(MANIFEST, RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=tmp_path))
    out = run_sweep(prepared, resolve_dataset("synthetic_detection"), ["class_id_plus_1"], visual_samples=0)
    store = service_app.state.store
    store.save_sweep(out.result)
    for rec in out.records:
        store.save(rec)
    variant = next(rec for rec in out.records if rec.run_id == out.result.variants[0].run_id)
    r = logged_in(service_app, tokens["viewer"]).get(f"/runs/{variant.run_id}")
    assert r.status_code == 200
    table = parse(r.text).tables["pitfalls-table"]
    assert [row[0] for row in table.rows] == ["reference", "class_id_plus_1"]
    assert "AP" in r.text and "Δ AP (paired)" in r.text and "McNemar" not in r.text and "Δ top-1" not in r.text
    ref, var = table.rows
    assert ref[3].startswith("1.000") and var[3].startswith("0.000")  # every class shifted: AP 1 -> 0
    assert var[4] == "-1.0000" and var[5] == "[-1.0000, -1.0000]"  # ΔAP and its interval as AP reads
    charts = [img for img in parse(r.text).images if "chart" in img.get("class", "").split()]
    assert all("top-1" not in (img.get("alt") or "") for img in charts)
