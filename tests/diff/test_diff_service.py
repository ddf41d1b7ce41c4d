"""Stored diffs through the service: ``/api/v1/diffs`` (list, one, figure; viewer token required; unknown query
parameters refused) and the web pages ``/diffs`` and ``/diffs/{id}`` (pipeline diff: diagnosis, stages, timing,
heatmaps; layer diff: per-layer chart and first divergence; task diff: agreement, McNemar, flipped samples); a diff
job's ``result_ids`` point at its stored diff."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")
pytest.importorskip("httpx", reason="the 'service' extra is not installed")

from fastapi.testclient import TestClient

from repliscope.datasets import resolve_dataset
from repliscope.diff.layers.layer_result import Divergence, LayerDiffResult, LayerRow, ModeSummary
from repliscope.diff.pipeline.candidate import load_candidate
from repliscope.diff.pipeline.driver import diff_pipeline
from repliscope.diff.pipeline.heatmap import heatmap_png
from repliscope.diff.task_level import FlippedSample, McNemar, TaskDiffResult
from repliscope.diff.tolerance import ErrorStats, TolerancePolicy
from repliscope.manifest.loader import load_manifest
from repliscope.store.diffs import store_diff
from tests.conftest import LITE0
from tests.diff import pipeline_candidates as pc
from tests.service import conftest as service_fixtures

# the service tests' fixtures (tests/service/conftest.py), used here by name
service_db_url = service_fixtures.service_db_url
service_app = service_fixtures.service_app
tokens = service_fixtures.tokens
client = service_fixtures.client
headers_for = service_fixtures.headers_for

Headers = Callable[[str], dict[str, str]]


def _pipeline_diff(tmp: Path) -> tuple[dict[str, Any], bytes]:
    for i, (h, w) in enumerate(((300, 400), (410, 290))):
        rng = np.random.default_rng(i)
        Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)).save(tmp / f"img_{i}.jpg")
    data = resolve_dataset(str(tmp))
    worst: list[tuple[str, np.ndarray, np.ndarray]] = []
    r = diff_pipeline(
        load_manifest(LITE0), load_candidate(f"{pc.__file__}:BROKEN_STAGES"), data.samples, data.name, worst=worst
    )
    return r.model_dump(mode="json"), heatmap_png(worst, "NCHW")


def _layer_diff() -> dict[str, Any]:
    ok = ErrorStats(max_abs=1e-7, mean_abs=1e-8, max_rel=1e-6, ulp=1.0, tolerance=1e-6, passed=True)
    bad = ErrorStats(max_abs=1e-2, mean_abs=1e-3, max_rel=1e-1, ulp=9e4, tolerance=1e-6, passed=False)
    rows = [
        LayerRow(
            index=i,
            path=p,
            covers=[p],
            kind="Conv2d",
            source="model.py:1",
            reduction=27,
            dtype="float32",
            ref_shape=[1, 8, 4, 4],
            ref_max_abs=1.0,
            golden=s,
        )
        for i, (p, s) in enumerate((("stem", ok), ("blocks.0", bad)))
    ]
    first = Divergence(
        mode="golden",
        index=1,
        path="blocks.0",
        covers=["blocks.0"],
        kind="Conv2d",
        source="model.py:1",
        max_abs=1e-2,
        tolerance=1e-6,
        ratio=1e4,
    )
    return LayerDiffResult(
        reference={"framework": "torch"},
        candidate={"candidate": "onnxruntime"},
        modes=["golden"],
        input_shape=[1, 3, 8, 8],
        input_dtype="float32",
        tolerance=TolerancePolicy(),
        formula="tol",
        layers=rows,
        reference_layers=2,
        uncompared=[],
        first_divergent={"golden": first},
        summary={"golden": ModeSummary(compared=2, passed=1, failed=1, max_ratio=1e4)},
        seconds=0.1,
    ).model_dump(mode="json")


def _task_diff() -> dict[str, Any]:
    return TaskDiffResult(
        source="runtimes",
        a="torch",
        b="onnxruntime",
        dataset="tiny",
        compared=4,
        agreement=0.75,
        agreements=3,
        flips=[FlippedSample(sample_id="cat_1.jpg", label=1, top1_a=1, top1_b=7)],
        mcnemar=McNemar(n=4, both_correct=2, both_wrong=1, only_a_correct=1, only_b_correct=0, p_value=1.0),
        outputs=[],
        per_sample=[],
    ).model_dump(mode="json")


def test_api_and_pages(service_app: Any, client: TestClient, headers_for: Headers, tmp_path: Path) -> None:
    store = service_app.state.store
    result, png = _pipeline_diff(tmp_path)
    pid = store_diff(store, result, manifest_name="efficientnet-lite0", figure=png)
    lid = store_diff(store, _layer_diff(), manifest_name="tiny-resnet")
    tid = store_diff(store, _task_diff(), manifest_name="tiny-resnet")

    assert client.get("/api/v1/diffs").status_code == 401
    page = client.get("/api/v1/diffs", headers=headers_for("viewer")).json()
    assert page["total"] == 3 and [i["diff_id"] for i in page["items"]] == [tid, lid, pid]
    assert [(i["kind"], i["verdict"]) for i in page["items"]] == [
        ("task_diff", "differ"),
        ("layer_diff", "failed"),
        ("pipeline_diff", "explained"),
    ]
    only = client.get("/api/v1/diffs?kind=pipeline_diff", headers=headers_for("viewer")).json()
    assert [i["diff_id"] for i in only["items"]] == [pid] and only["items"][0]["has_figure"] is True
    bad = client.get("/api/v1/diffs?knd=x", headers=headers_for("viewer"))
    assert bad.status_code == 422 and "unknown query parameter 'knd'" in bad.text
    one = client.get(f"/api/v1/diffs/{pid[:8]}", headers=headers_for("viewer")).json()
    assert one["result"]["diagnosis"]["variant"] == "resize_bilinear"
    assert one["result"]["first_divergent_stage"] == "resize"
    figure = client.get(f"/api/v1/diffs/{pid}/figure", headers=headers_for("viewer"))
    assert figure.headers["content-type"] == "image/png" and figure.content == png
    assert client.get(f"/api/v1/diffs/{lid}/figure", headers=headers_for("viewer")).status_code == 404
    assert client.get("/api/v1/diffs/ffffffffffff", headers=headers_for("viewer")).status_code == 404

    assert client.get("/diffs", follow_redirects=False).status_code in (302, 303, 307)
    client.cookies.set("repliscope_token", service_app.state.test_admin_token)
    listing = client.get("/diffs")
    assert listing.status_code == 200 and listing.text.count('<a href="/diffs/') == 3
    pipe = client.get(f"/diffs/{pid}").text
    assert "your pipeline = the manifest with `resize_bilinear`" in pipe
    assert 'id="first-divergent">First divergent stage: <strong>resize</strong>' in pipe
    assert f'src="/diffs/{pid}/figure.png"' in pipe and 'id="timing"' in pipe
    assert client.get(f"/diffs/{pid}/figure.png").content == png
    layer = client.get(f"/diffs/{lid}").text
    assert "first divergent <strong>blocks.0</strong>" in layer and 'src="data:image/png;base64,' in layer
    task = client.get(f"/diffs/{tid}").text
    assert "75.00 %" in task and '<th scope="row">cat_1.jpg</th>' in task and "p = 1" in task
    assert client.get("/diffs/nope00000000").status_code == 404


def test_a_diff_jobs_result_ids_point_at_its_stored_diff(service_app: Any) -> None:
    from repliscope.job_execution import JobOutcome
    from repliscope.store.diffs import get_diff

    store = service_app.state.store
    outcome = JobOutcome(summary=TaskDiffResult.model_validate(_task_diff()).model_dump_json())
    stored = store.save_outcome(outcome, "job-key-1", kind="diff")
    assert len(stored.diff_ids) == 1 and stored.all_ids == stored.diff_ids
    assert get_diff(store, stored.diff_ids[0]).result["agreement"] == 0.75
    again = store.save_outcome(outcome, "job-key-1", kind="diff")
    assert (again.duplicate, again.diff_ids) == (True, stored.diff_ids)
