"""Issue 36 items 5 and 6 without a browser: two runs made in the same stack compare equal on normalised values
(libraries listed in another order, a conversion's cache state, ``null`` against a missing item), on the compare
page and in ``GET /api/v1/runs/compare``; a real difference is still named; the comparison of two stored runs is
computed once for any number of views and re-scores nothing when both runs evaluated the same samples."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from repliscope.evaluation.record import EvaluationRecord
from repliscope.service.web import chart_cache
from repliscope.service.web.compare_cache import comparison_of
from repliscope.service.web.stack_compare import INCIDENTAL_NOTE, differing_items
from tests.service.test_web_detection import detection_runs  # noqa: F401  (fixture)
from tests.service.test_web_pages import a11y, logged_in, parse
from tests.store.records import TOP1_A, make_record

OPENBLAS = {"user_api": "blas", "internal_api": "openblas", "version": "0.3.31.188.0", "num_threads": 2}
OPENMP = {"user_api": "openmp", "internal_api": "openmp", "version": None, "num_threads": 2}


def _pair(**b_runtime: Any) -> tuple[EvaluationRecord, EvaluationRecord]:
    """Two runs of one stack as two processes record it: the libraries loaded in another order, the conversion
    reused from the cache by the second, ``checkpoint_key`` recorded as null by one and not at all by the other."""
    a = make_record("a6" * 16, TOP1_A)
    b = make_record("b6" * 16, TOP1_A)
    a.software["threadpools"] = [OPENBLAS, OPENMP]
    b.software["threadpools"] = [OPENMP, OPENBLAS]
    a.runtime["conversion"] = {"onnx_sha256": "c" * 64, "cached": False}
    b.runtime["conversion"] = {"onnx_sha256": "c" * 64, "cached": True}
    a.runtime["model"] = {"checkpoint_key": None, "weights_dtypes": ["float32"]}
    b.runtime["model"] = {"weights_dtypes": ["float32"]}
    b.runtime.update(b_runtime)
    return a, b


@pytest.fixture
def stored(service_app: Any) -> Callable[..., tuple[EvaluationRecord, EvaluationRecord]]:
    def save(**b_runtime: Any) -> tuple[EvaluationRecord, EvaluationRecord]:
        a, b = _pair(**b_runtime)
        service_app.state.store.save(a)
        service_app.state.store.save(b)
        return a, b

    return save


def test_runs_of_one_stack_compare_equal_on_the_page(service_app: Any, tokens: dict[str, str], stored: Any) -> None:
    a, b = stored()
    r = logged_in(service_app, tokens["viewer"]).get(f"/compare?a={a.run_id}&b={b.run_id}")
    assert r.status_code == 200
    why = a11y(r.text).text_of("compare-why")
    assert "The stacks differ" not in why
    assert "The pipelines and the stacks (runtime, software, hardware) are identical." in why
    rows = {row[0]: row for row in parse(r.text).tables["stack-diff"].rows}
    assert rows["runtime.conversion.cached"] == [
        "runtime.conversion.cached",
        "False",
        "True",
        f"same ({INCIDENTAL_NOTE})",
    ]
    assert rows["runtime.model.checkpoint_key"] == ["runtime.model.checkpoint_key", "—", "—", "same"]
    assert rows["software.threadpools"][3] == "same"
    assert rows["software.threadpools"][1] == rows["software.threadpools"][2]  # shown sorted: one text
    assert all(row[3].startswith("same") for row in rows.values())
    c = b.model_copy(update={"run_id": "c6" * 16})
    c.software["threadpools"] = [OPENBLAS, OPENMP]
    service_app.state.store.save(c)
    three = logged_in(service_app, tokens["viewer"]).get(f"/compare?run={a.run_id}&run={b.run_id}&run={c.run_id}")
    across = {row[0]: row for row in parse(three.text).tables["stack-across"].rows}
    assert across["software.threadpools"][-1] == "same" and across["runtime.conversion.cached"][-1] == "same"
    assert all(row[-1] == "same" for row in across.values())


def test_runs_of_one_stack_compare_equal_in_the_api(client: Any, headers_for: Any, stored: Any) -> None:
    a, b = stored()
    r = client.get(f"/api/v1/runs/compare?a={a.run_id}&b={b.run_id}", headers=headers_for("viewer"))
    assert r.status_code == 200
    assert r.json()["stack_differences"] == []
    assert r.json()["same_result_hash"] is True


def test_a_real_difference_of_the_stacks_is_still_named(
    service_app: Any, tokens: dict[str, str], client: Any, headers_for: Any, stored: Any
) -> None:
    a, b = stored(framework_version="1.32.0", conversion={"onnx_sha256": "d" * 64, "cached": True})
    api = client.get(f"/api/v1/runs/compare?a={a.run_id}&b={b.run_id}", headers=headers_for("viewer")).json()
    assert api["stack_differences"] == ["runtime.framework_version", "runtime.conversion.onnx_sha256"]
    page = logged_in(service_app, tokens["viewer"]).get(f"/compare?a={a.run_id}&b={b.run_id}").text
    why = a11y(page).text_of("compare-why")
    assert "The stacks differ in runtime.framework_version, runtime.conversion.onnx_sha256." in why
    assert "cached" not in why and "threadpools" not in why


def test_unordered_only_where_order_means_nothing() -> None:
    a, b = _pair()
    a.runtime["providers"] = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    b.runtime["providers"] = ["CPUExecutionProvider", "CUDAExecutionProvider"]  # a priority order: a difference
    assert differing_items([a, b]) == ["runtime.providers"]


def test_a_comparison_is_computed_once_for_every_view(
    service_app: Any,
    tokens: dict[str, str],
    client: Any,
    headers_for: Any,
    stored: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from repliscope.store import compare

    a, b = stored()
    calls: list[tuple[str, str]] = []
    real = compare.compare_runs

    def counted(x: EvaluationRecord, y: EvaluationRecord) -> Any:
        calls.append((x.run_id, y.run_id))
        return real(x, y)

    monkeypatch.setattr(compare, "compare_runs", counted)
    monkeypatch.setattr(chart_cache, "CHARTS", chart_cache.ChartCache())
    web = logged_in(service_app, tokens["viewer"])
    for _ in range(2):
        assert web.get(f"/compare?a={a.run_id}&b={b.run_id}").status_code == 200
        api = client.get(f"/api/v1/runs/compare?a={a.run_id}&b={b.run_id}", headers=headers_for("viewer"))
        assert api.status_code == 200
    assert calls == [(a.run_id, b.run_id)]
    assert client.get(f"/api/v1/runs/compare?a={b.run_id}&b={a.run_id}", headers=headers_for("viewer")).is_success
    assert calls == [(a.run_id, b.run_id), (b.run_id, a.run_id)]  # B against A is another comparison


def test_a_changed_result_is_compared_again() -> None:
    cache = chart_cache.ChartCache()
    a, b = _pair()
    first = comparison_of(a, b, cache)
    assert comparison_of(a, b, cache) is first
    b2 = b.model_copy(update={"result_hash": "0" * 64})
    again = comparison_of(a, b2, cache)
    assert again is not first and again.same_result_hash is False and first.same_result_hash is True


def test_runs_of_the_same_samples_are_not_scored_again(
    detection_runs: list[EvaluationRecord],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both runs evaluated every sample: each run's stored metrics are its paired metrics (COCO re-scoring of
    158 images took 3 s a view); the task's scoring must not run."""
    from repliscope.store.compare import compare_runs
    from repliscope.tasks.detection import ObjectDetection

    def refuse(*_args: Any) -> Any:
        raise AssertionError("re-scored a run whose stored metrics are the paired ones")

    monkeypatch.setattr(ObjectDetection, "metrics", refuse)
    a, b = detection_runs
    deltas = {d.name: d for d in compare_runs(a, b).metric_deltas}
    stored_a, stored_b = a.metric("AP"), b.metric("AP")
    assert stored_a is not None and stored_b is not None
    assert (deltas["AP"].paired_a, deltas["AP"].paired_b) == (stored_a.value, stored_b.value)
    assert deltas["AP"].paired_n == 16 and deltas["AP"].paired_delta == stored_b.value - stored_a.value


def test_runs_of_different_samples_are_scored_on_the_shared_ones(
    detection_runs: list[EvaluationRecord],  # noqa: F811
) -> None:
    from repliscope.store.compare import compare_runs

    a, b = detection_runs
    failed = b.samples[0].model_copy(update={"detections": None, "error": "SampleError: truncated"})
    b2 = b.model_copy(update={"run_id": "e7" * 16, "samples": [failed, *b.samples[1:]]})
    ap = next(d for d in compare_runs(a, b2).metric_deltas if d.name == "AP")
    assert ap.paired_n == 15 and ap.paired_a == ap.paired_b  # the same detections on the 15 shared images
