"""Issue 36 item 8 (charts): :func:`repliscope.store.run_charts.chart_data` on stored runs with known metrics
(:mod:`tests.store.chart_runs`): the groups, their order, each run's value and interval, the claims, the bound."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from repliscope.store.errors import InvalidInputError
from repliscope.store.repository import RunQuery, RunStore
from repliscope.store.run_charts import GROUPINGS, MAX_CHART_RUNS, chart_data, chart_metrics
from tests.store.backends import BACKENDS, POSTGRES, wipe
from tests.store.chart_runs import AP50_CLAIM, CLASSIFICATION, seed, top1_of


@pytest.fixture(scope="module", params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunStore]:
    """The chart runs on SQLite, and on PostgreSQL when one is given (the JSON paths differ by dialect)."""
    path: Path = tmp_path_factory.mktemp("charts") / "runs.db"
    url = f"sqlite:///{path}" if request.param == "sqlite" else str(POSTGRES)
    with RunStore(url) as s:
        try:
            seed(s)
            yield s
        finally:
            if request.param != "sqlite":
                wipe(s.engine)


def ids(data: Any) -> list[str]:
    return [p.run_id[:2] for p in data.points]


def test_framework_versions_are_grouped_in_version_order_with_each_runs_value_and_interval(store: RunStore) -> None:
    data = chart_data(store, "top1", "framework_version")
    assert data.groups == ("onnxruntime 1.9.0", "onnxruntime 1.31.1", "torch 2.13.0")  # 1.9 < 1.31, not as text
    assert ids(data) == ["f1", "f2", "f3", "f5", "f6", "f4"]  # by group, oldest first within one
    by_id = {p.run_id[:2]: p for p in data.points}
    for run_id, _runtime, _version, _stack, correct, _variant in CLASSIFICATION:
        expected = top1_of(correct)
        point = by_id[run_id[:2]]
        assert (point.value, point.low, point.high) == (expected.value, expected.ci_low, expected.ci_high)
    assert by_id["f1"].value == 0.7 and by_id["f6"].value == 0.45
    assert (data.matched, data.read, data.without_value, data.more) == (6, 6, 0, 0)
    assert data.metric.task == "image_classification" and data.metric.unit == "percent"
    assert [(c.model, c.value) for c in data.claims] == [("mobilenet-v2", 0.751)]


@pytest.mark.parametrize(
    ("by", "groups"),
    [
        ("runtime", {"onnxruntime": ["f1", "f2", "f3", "f5", "f6"], "torch": ["f4"]}),
        (
            "stack",
            {"current ab12cd34": ["f3"], "ort-new": ["f2", "f5", "f6"], "ort-old": ["f1"], "not recorded": ["f4"]},
        ),
        ("variant", {"reference": ["f5"], "color_layout_swapped": ["f6"], "plain run": ["f1", "f2", "f3", "f4"]}),
        ("model", {"mobilenet-v2@1.0.0": ["f1", "f2", "f3", "f4", "f5", "f6"]}),
        ("dataset", {"foolbox_imagenet": ["f1", "f2", "f3", "f4", "f5", "f6"]}),
    ],
)
def test_each_grouping(store: RunStore, by: str, groups: dict[str, list[str]]) -> None:
    data = chart_data(store, "top1", by)
    assert data.groups == tuple(groups)
    assert {g: [p.run_id[:2] for p in data.points if p.group == g] for g in data.groups} == groups


def test_a_metric_that_is_not_the_headline_is_read_from_the_record_with_its_claim(store: RunStore) -> None:
    data = chart_data(store, "AP50", "runtime")
    assert data.metric.task == "object_detection" and not data.metric.headline
    assert [(p.run_id[:2], p.value, p.low, p.high) for p in data.points] == [("e1", 0.512, 0.462, 0.562)]
    assert data.without_value == 1 and data.matched == 2  # e2: every image failed, counted and not drawn
    assert [c.value for c in data.claims] == [AP50_CLAIM]
    ap = chart_data(store, "AP", "runtime")
    assert [(p.value, p.low) for p in ap.points] == [(0.3312, 0.2812)] and ap.claims == ()


def test_the_filters_are_the_runs_lists_and_the_bound_says_how_many_more_matched(store: RunStore) -> None:
    torch = chart_data(store, "top1", "runtime", RunQuery(runtime="torch"))
    assert ids(torch) == ["f4"]
    listed, _ = store.query_runs(RunQuery(search="color_layout"), page_size=50)
    searched = chart_data(store, "top1", "variant", RunQuery(search="color_layout"))
    assert ids(searched) == [r.run_id[:2] for r in listed] == ["f6"]
    newest = chart_data(store, "top1", "runtime", limit=2)
    assert sorted(ids(newest)) == ["f5", "f6"]  # the newest two
    assert (newest.read, newest.matched, newest.more) == (2, 6, 4)


def test_bad_input_names_the_field_and_the_allowed_values(store: RunStore) -> None:
    with pytest.raises(InvalidInputError) as metric:
        chart_data(store, "accuracy", "runtime")
    assert metric.value.field == "metric" and "top1, top5, AP" in str(metric.value)
    with pytest.raises(InvalidInputError) as by:
        chart_data(store, "top1", "colour")
    assert by.value.field == "by" and ", ".join(GROUPINGS) in str(by.value)
    with pytest.raises(InvalidInputError) as limit:
        chart_data(store, "top1", "runtime", limit=MAX_CHART_RUNS + 1)
    assert limit.value.field == "limit" and "1..500" in str(limit.value)
    with pytest.raises(InvalidInputError) as verdict:
        chart_data(store, "top1", "runtime", RunQuery(verdict="great"))
    assert verdict.value.field == "verdict"


def test_every_tasks_metrics_are_chartable_headline_first() -> None:
    metrics = chart_metrics()
    assert [m.name for m in metrics.values() if m.headline] == ["top1", "AP", "mIoU"]
    assert metrics["mIoU"].task == "semantic_segmentation" and metrics["top5"].unit == "percent"
