"""Issue 36 item 8 (charts) on the pages: ``/charts`` (a metric across runs, grouped, filtered, bounded) and
``/sweeps/{id}/parallel`` (a sweep's parallel coordinates), their links from the nav, the runs page and a sweep's
run page, what a viewer may ask (hostile query parameters: 422 naming the allowed values) and accessibility."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the 'service' extra is not installed")

from fastapi.testclient import TestClient

from tests.service.test_web_pages import a11y, assert_accessible, logged_in
from tests.store.chart_runs import MODEL


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A service on a store with the chart runs (:mod:`tests.store.chart_runs`) and the factory sweep."""
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.accounts import create_token
    from tests.report.factories import sweep, sweep_records
    from tests.report.test_run_charts import parameter_sweep
    from tests.store.chart_runs import seed

    root = tmp_path_factory.mktemp("chart-pages")
    application = create_app(ServiceConfig(db_url=f"sqlite:///{root / 'runs.db'}"))
    store = application.state.store
    first_start(store)
    seed(store)
    store.save_sweep(parameter_sweep())
    for r in sweep_records().values():
        store.save(r)
    assert sweep().sweep_id == parameter_sweep().sweep_id
    application.state.viewer_token = create_token(store, "chart-viewer", "viewer")
    yield application
    application.state.executor.shutdown(wait=True)
    application.state.cluster.close()


@pytest.fixture(scope="module")
def web(app: Any) -> TestClient:
    return logged_in(app, app.state.viewer_token)


def alert(html: str) -> str:
    found = re.search(r'<p class="error" role="alert">([^<]*)</p>', html)
    assert found is not None, html[:500]
    return found.group(1).replace("&#39;", "'")


def svg_hrefs(html: str) -> list[str]:
    svg = html.split("<svg", 1)[1].split("</svg>", 1)[0]
    return re.findall(r'<a href="(/runs/[0-9a-f]+)"', svg)


def test_the_chart_page_draws_a_metric_by_framework_version_with_a_table(web: TestClient) -> None:
    from repliscope.service.web.metric_format import interval_text, value_text
    from tests.store.chart_runs import top1_of

    r = web.get("/charts", params={"metric": "top1", "by": "framework_version", "model": MODEL})
    assert r.status_code == 200, r.text[:400]
    assert_accessible(r.text)
    summary = a11y(r.text).text_of("chart-summary")
    assert "6 runs of the image classification task charted: top1 by framework version, in 3 groups." in summary
    assert '<title id="run-chart-title">top1 by framework version: 6 runs</title>' in r.text
    expected = ["f1", "f2", "f3", "f5", "f6", "f4"]  # 1.9.0, then 1.31.1 oldest first, then torch
    assert svg_hrefs(r.text) == [f"/runs/{x * 16}" for x in expected]
    table = r.text.split('id="chart-table"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>([^<]*)</td><td><a href=\"/runs/(\w+)\">.*?</tr>", table)
    assert [(g, i[:2]) for g, i in rows] == [
        ("onnxruntime 1.9.0", "f1"),
        ("onnxruntime 1.31.1", "f2"),
        ("onnxruntime 1.31.1", "f3"),
        ("onnxruntime 1.31.1", "f5"),
        ("onnxruntime 1.31.1", "f6"),
        ("torch 2.13.0", "f4"),
    ]
    c1 = top1_of(14)
    assert f'<td class="num">{value_text("top1", c1.value)}</td><td class="num">' in table
    assert interval_text("top1", c1.ci_low, c1.ci_high) in table
    claims = a11y(r.text).text_of("chart-claims")
    assert MODEL in claims and value_text("top1", 0.751) in claims
    assert 'class="claims"' in r.text  # the claim's reference line in the SVG


def test_filters_the_bound_and_a_metric_of_another_task(web: TestClient) -> None:
    torch = web.get("/charts", params={"metric": "top1", "by": "runtime", "runtime": "torch"})
    assert svg_hrefs(torch.text) == [f"/runs/{'f4' * 16}"]
    assert 'href="/runs?runtime=torch"' in torch.text  # these runs in the runs list
    newest = web.get("/charts", params={"by": "stack", "limit": "2", "model": MODEL})
    assert "The newest 2 of 6 matching runs are charted" in a11y(newest.text).text_of("chart-more")
    assert sorted(svg_hrefs(newest.text)) == [f"/runs/{'f5' * 16}", f"/runs/{'f6' * 16}"]
    sweep = web.get("/charts", params={"by": "variant", "sweep_id": "5e2f0c1d9a8b"})  # the 12 characters shown
    assert len(svg_hrefs(sweep.text)) == 6  # f5, f6 and the factory sweep's four runs carry its id
    detection = web.get("/charts", params={"task": "object_detection"})
    assert detection.status_code == 200 and "AP by runtime: 1 run" in detection.text
    assert "1 run with no value of AP (every sample failed)" in a11y(detection.text).text_of("chart-without")
    empty = web.get("/charts", params={"metric": "mIoU"})
    assert empty.status_code == 200 and "<svg" not in empty.text
    assert "No stored run of the semantic segmentation task matches" in a11y(empty.text).text_of("chart-empty")
    assert_accessible(empty.text)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"metric": "accuracy"}, "unknown metric 'accuracy' (allowed: top1, top5, AP, AP50,"),
        ({"by": "colour"}, "unknown grouping by='colour' (allowed: runtime, stack, framework_version, variant, "),
        ({"sort": "-metric"}, "unknown query parameter 'sort' (allowed: metric, by, task, limit, search, model,"),
        ({"task": "ocr"}, "unknown task 'ocr' (allowed: image_classification, object_detection,"),
        ({"task": "object_detection", "metric": "top1"}, "metric 'top1' is not one of task object_detection's"),
        ({"limit": "501"}, "limit must be a whole number from 1 to 500, not '501'"),
        ({"limit": "9" * 5000}, "limit must be a whole number from 1 to 500"),
        ({"limit": "-1"}, "limit must be a whole number from 1 to 500, not '-1'"),
        ({"model": "m" * 301}, "model must be at most 300 characters"),
        ({"search": "s" * 201}, "search must be at most 200 characters"),
        ({"created_from": "yesterday"}, "created_from must be a date YYYY-MM-DD, not 'yesterday'"),
        ({"verdict": "great"}, "verdict: verdict 'great' is not a verdict (allowed: consistent,"),
    ],
)
def test_hostile_chart_queries_are_refused_naming_the_allowed_values(
    web: TestClient, params: dict[str, str], message: str
) -> None:
    r = web.get("/charts", params=params)
    assert r.status_code == 422, r.text[:300]
    assert message in alert(r.text)
    assert len(r.text) < 20_000  # the refusal does not echo a huge value back


def test_every_filter_of_the_runs_page_is_taken_so_its_chart_link_works(web: TestClient) -> None:
    from repliscope.service.web import views

    values = {"verdict": "consistent", "sweep_id": "5e2f0c1d9a8b", "created_from": "2026-11-21"}
    for key in ("search", *views.RUN_FILTERS, "created_from", "created_to"):
        runs = web.get("/runs", params={key: values.get(key, "2026-11-22" if key == "created_to" else "x")})
        link = re.search(r'<a id="chart-these-runs" href="([^"]+)">', runs.text)
        assert link is not None, key
        chart = web.get(link.group(1).replace("&amp;", "&"))
        assert chart.status_code == 200, (key, alert(chart.text))
        assert_accessible(chart.text)
    sweep = web.get("/charts", params={"sweep_id": "5e2f0c1d9a8b", "by": "variant"})
    assert '<select id="chart-sweep_id" name="sweep_id"><option value="5e2f0c1d9a8b' in sweep.text  # kept, clearable


def test_injected_filter_values_are_text(web: TestClient) -> None:
    from tests.report.factories import INJECTION

    r = web.get("/charts", params={"model": INJECTION})
    assert r.status_code == 200 and INJECTION not in r.text
    assert 'href="/runs?model=%3Cscript%3Ealert' in r.text  # kept, URL-encoded, in the runs-list link


def test_the_parallel_coordinates_of_a_sweep(web: TestClient) -> None:
    from tests.report.factories import SWEEP_ID, VARIANT_RUN_IDS

    r = web.get(f"/sweeps/{SWEEP_ID[:12]}/parallel")
    assert r.status_code == 200, r.text[:400]
    assert_accessible(r.text)
    assert r.text.count('<polyline class="pc-path"') == 4 and len(svg_hrefs(r.text)) == 4
    assert f"Parallel coordinates of sweep {SWEEP_ID[:12]}: 4 runs, top1" in r.text
    table = a11y(r.text).text_of("parallel-table")
    assert "color_layout_swapped" in table and "scale" in r.text and "[1, 0]" in table
    assert "float16_inference: onnxruntime CPUExecutionProvider: no float16 kernel for Conv" in a11y(r.text).text_of(
        "parallel-left-out"
    )
    chosen = VARIANT_RUN_IDS["data_layout_bug"]
    assert f"/sweeps/{SWEEP_ID}/parallel?metric=top1&amp;run={chosen}" in r.text  # the table's "highlight" link
    picked = web.get(f"/sweeps/{SWEEP_ID}/parallel", params={"run": chosen, "metric": "top5"})
    assert picked.status_code == 200 and 'class="pc-line chosen"' in picked.text and ": 4 runs, top5" in picked.text
    assert_accessible(picked.text)
    for params, status, message in (
        ({"run": "ffff"}, 422, "run 'ffff' is not a drawn run of sweep"),
        ({"metric": "AP"}, 422, "(allowed: top1, top5)"),
        ({"colour": "red"}, 422, "unknown query parameter 'colour' (allowed: metric, run)"),
        ({"run": "f" * 5000}, 422, "at most 100 characters"),
    ):
        bad = web.get(f"/sweeps/{SWEEP_ID}/parallel", params=params)
        assert bad.status_code == status and message in alert(bad.text), (params, bad.text[:300])
    unknown = web.get("/sweeps/ffffffffffff/parallel")
    assert unknown.status_code == 404 and "ffffffffffff" in alert(unknown.text)


def test_the_charts_are_linked_and_need_a_signed_in_viewer(app: Any, web: TestClient) -> None:
    from tests.report.factories import SWEEP_ID, VARIANT_RUN_IDS

    runs = web.get("/runs", params={"runtime": "torch"}).text
    assert '<li><a href="/charts">Charts</a></li>' in runs
    assert '<a id="chart-these-runs" href="/charts?runtime=torch">' in runs
    run = web.get(f"/runs/{VARIANT_RUN_IDS['reference']}").text
    assert f'<a id="sweep-parallel" href="/sweeps/{SWEEP_ID}/parallel">' in run
    anonymous = TestClient(app)
    for path in ("/charts", f"/sweeps/{SWEEP_ID}/parallel"):
        r = anonymous.get(path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")
