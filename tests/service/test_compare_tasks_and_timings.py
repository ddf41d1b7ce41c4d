"""Issue 36 items 2, 8 and 9 on the compare page without a browser: runs of different tasks are refused with the
reason (422 on the page and in the API, naming each run's task and what can be compared instead); hostile query
parameters are refused with the bound; the flipped samples' thumbnails open larger."""

from __future__ import annotations

import io
from typing import Any

import pytest
from PIL import Image

from repliscope.evaluation.record import EvaluationRecord, result_hash
from tests.service.test_web_detection import MANIFEST as DETECTOR
from tests.service.test_web_pages import a11y, assert_accessible, logged_in, parse
from tests.store.records import TOP1_A, TOP1_B, make_record


@pytest.fixture(scope="module")
def detections(tmp_path_factory: pytest.TempPathFactory) -> list[EvaluationRecord]:
    """The rect detector on the 16 synthetic images (onnxruntime, ~2 s: the one real run of this module), and
    the same run with the first image's detections gone (run B: one differing image)."""
    from repliscope.datasets.resolve import resolve_dataset
    from repliscope.evaluation.run import RunSettings, evaluate, prepare

    cache = tmp_path_factory.mktemp("cache")
    settings = RunSettings(runtime="onnxruntime", threads=1, batch_size=1, cache_dir=cache)
    a = evaluate(prepare(DETECTOR, settings), resolve_dataset("synthetic_detection"))
    samples = [a.samples[0].model_copy(update={"detections": []}), *a.samples[1:]]
    b = a.model_copy(update={"run_id": "d7" * 16, "samples": samples, "result_hash": result_hash(samples)})
    return [a, b]


@pytest.fixture
def stored(service_app: Any, detections: list[EvaluationRecord]) -> dict[str, EvaluationRecord]:
    """Two classification runs (Lite0-shaped, one flip) and the two detection runs."""
    runs = {
        "cls_a": make_record("a7" * 16, TOP1_A),
        "cls_b": make_record("b7" * 16, TOP1_B),
        "det_a": detections[0],
        "det_b": detections[1],
    }
    for r in runs.values():
        service_app.state.store.save(r)
    return runs


def test_a_compare_of_mixed_tasks_is_refused_with_the_reason(
    service_app: Any, tokens: dict[str, str], stored: dict[str, EvaluationRecord]
) -> None:
    cls_a, cls_b, det_a = stored["cls_a"].run_id, stored["cls_b"].run_id, stored["det_a"].run_id
    client = logged_in(service_app, tokens["viewer"])
    r = client.get(f"/compare?run={cls_a}&run={det_a}&run={cls_b}")
    assert r.status_code == 422
    reason = a11y(r.text).text_of("compare-refused-reason")
    assert reason.startswith("runs of different tasks cannot be compared (image_classification and object_detection)")
    assert f"run {cls_a[:12]} is image_classification (top1, top5)" in reason
    assert f"run {det_a[:12]} is object_detection (AP, AP50, AP75" in reason
    rows = {row[0]: row for row in parse(r.text).tables["compare-refused-runs"].rows}
    assert rows["A"][1:4] == [cls_a[:12], "efficientnet-lite0 1.0.0", "image_classification"]
    assert rows["B"][3] == "object_detection" and rows["C"][3] == "image_classification"
    instead = a11y(r.text).text_of("compare-instead")
    assert "Compare the 2 image_classification runs (A, C)" in instead
    assert "Run B is the only object_detection run asked" in instead
    assert f'href="/compare?run={cls_a}&amp;run={cls_b}"' in r.text
    assert "compare-metrics" not in parse(r.text).tables  # no half-empty table
    assert_accessible(r.text)
    assert client.get(f"/compare?a={cls_a}&b={det_a}").status_code == 422


def test_the_api_refuses_a_compare_of_mixed_tasks_with_422(
    client: Any, headers_for: Any, stored: dict[str, EvaluationRecord], monkeypatch: pytest.MonkeyPatch
) -> None:
    from repliscope.store import compare

    computed: list[str] = []
    real = compare.compare_runs

    def counted(a: EvaluationRecord, b: EvaluationRecord) -> Any:
        computed.append(a.run_id)
        return real(a, b)

    monkeypatch.setattr(compare, "compare_runs", counted)
    cls_a, det_a = stored["cls_a"].run_id, stored["det_a"].run_id
    r = client.get(f"/api/v1/runs/compare?a={cls_a}&b={det_a}", headers=headers_for("viewer"))
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "invalid"
    assert r.json()["error"]["message"].startswith(
        f"runs of different tasks cannot be compared (image_classification and object_detection): run "
        f"{cls_a[:12]} is image_classification (top1, top5); run {det_a[:12]} is object_detection (AP, "
    )
    assert computed == []  # refused before either record is read whole


def test_compare_runs_refuses_mixed_tasks() -> None:
    from repliscope.store.compare import MixedTasksError, compare_runs

    a = make_record("a8" * 16, TOP1_A)
    b = make_record("b8" * 16, TOP1_B).model_copy(update={"task": "semantic_segmentation", "metrics": []})
    with pytest.raises(MixedTasksError) as err:
        compare_runs(a, b)
    assert err.value.runs == [
        ("a8" * 16, "image_classification", ["top1", "top5"]),
        ("b8" * 16, "semantic_segmentation", []),
    ]
    assert f"run {'b8' * 6} is semantic_segmentation (no metric)" in str(err.value)


def test_hostile_compare_queries_are_refused_with_the_bound(
    service_app: Any, tokens: dict[str, str], stored: dict[str, EvaluationRecord]
) -> None:
    client = logged_in(service_app, tokens["viewer"])
    cls_a = stored["cls_a"].run_id
    many = "&".join(f"run={cls_a[:10]}{i:02d}" for i in range(13))
    r = client.get(f"/compare?{many}")
    assert r.status_code == 422 and "compare takes at most 12 runs, got 13" in r.text
    r = client.get(f"/compare?run={cls_a}&run={'f' * 5000}")
    assert r.status_code == 422 and "a run id is at most 100 characters, got 5000" in r.text
    r = client.get(f"/compare?run={cls_a}&run=ffffffffffff")
    assert r.status_code == 404 and "ffffffffffff" in r.text
    r = client.get(f"/compare?run={cls_a}&run=%3Cscript%3Ealert(1)%3C/script%3E")
    assert r.status_code == 404 and "<script>" not in r.text


# --- latency and throughput (item 8) ------------------------------------------------------------------------


def _table(html: str, table: str) -> dict[str, list[str]]:
    return {row[0]: row for row in parse(html).tables[table].rows}


def test_compare_shows_latency_and_throughput_with_their_conditions(service_app: Any, tokens: dict[str, str]) -> None:
    a = make_record("a9" * 16, TOP1_A)  # 3 batches of 8: 331.2, 310.7, 270.2 ms; no loop_seconds (older record)
    b = make_record("b9" * 16, TOP1_B)
    b.options["threads"] = 4
    b.timings.batch_latencies_seconds = [0.0412, 0.0398, 0.0405, 0.0951]
    b.timings.loop_seconds, b.timings.throughput_samples_per_second = 0.4, 47.5
    for r in (a, b):
        service_app.state.store.save(r)
    client = logged_in(service_app, tokens["viewer"])
    r = client.get(f"/compare?a={a.run_id}&b={b.run_id}")
    assert r.status_code == 200
    assert a11y(r.text).text_of("perf-verdict") == (
        "not comparable: threads 2 vs 4; timing whole run, model load included vs read + pre-process + infer"
    )
    timings = _table(r.text, "compare-perf-table")
    assert timings["A"][1:] == [
        "10.1 img/s",
        "310.70 ms",  # LoadGen's floor(n * p) order statistic of the 3 batch latencies
        "331.20 ms",
        "331.20 ms",
        "one batch of 8 images (3 batches)",
        "",
    ]
    assert timings["B"][1:5] == ["47.5 img/s", "41.20 ms", "95.10 ms", "95.10 ms"]
    conditions = _table(r.text, "compare-perf-conditions")
    assert conditions["threads"] == ["threads", "2", "4", "differs"]
    assert conditions["hardware"] == ["hardware", "AMD EPYC, 2 cores", "AMD EPYC, 2 cores", "same"]
    assert conditions["batch size"][1:] == ["8", "8", "same"]
    assert conditions["stack"][1:] == ["onnxruntime 1.31.1", "onnxruntime 1.31.1", "same"]
    assert_accessible(r.text)
    c = make_record("c9" * 16, TOP1_A)
    service_app.state.store.save(c)
    same = client.get(f"/compare?run={a.run_id}&run={c.run_id}")
    verdict = "comparable: same hardware, threads, batch size, stack and timing"
    assert a11y(same.text).text_of("perf-verdict") == verdict


def test_the_timings_name_which_runs_differ_and_what_a_sweeps_throughput_is_over() -> None:
    from repliscope.service.web.compare_perf import load_text, runs_table

    assert load_text({"scenario": "server", "target_qps": 50.0}) == "50.0 queries/s arriving"
    assert load_text({"scenario": "multi-stream", "samples_per_query": 8}) == "8 images a query"

    a, b, c = make_record("a9" * 16, TOP1_A), make_record("b9" * 16, TOP1_B), make_record("c9" * 16, TOP1_A)
    b.options["threads"] = 4
    assert runs_table([a, b, c], "ABC").verdict == "not comparable: threads 2 (A, C) vs 4 (B)"
    variant = make_record("d9" * 16, TOP1_A, sweep_id="5e" * 16, variant="bgr")
    variant.timings.loop_seconds = variant.timings.inference_seconds
    standalone = make_record("e9" * 16, TOP1_A)
    standalone.timings.loop_seconds = 1.5
    table = runs_table([a, variant, standalone], "ABC")
    assert table.conditions[-1] == (
        "timing",
        ["whole run, model load included", "infer only (a sweep's shared loop)", "read + pre-process + infer"],
        False,
    )


@pytest.fixture(scope="module")
def benchmarks() -> list[Any]:
    """Two benchmarks of Lite0 (a fake runtime's latencies, single-stream, 64 queries), the second on 4 threads."""
    from tests.service.test_benchmarks_and_result_links import copies, lite0_benchmark

    first, second = copies(lite0_benchmark(), 2, "lite0")
    second = second.model_copy(update={"settings": {**second.settings, "threads": 4}})
    return [first, second]


def test_benchmarks_compare_side_by_side(service_app: Any, tokens: dict[str, str], benchmarks: list[Any]) -> None:
    for rec in benchmarks:
        service_app.state.store.save_benchmark(rec)
    a, b = benchmarks
    client = logged_in(service_app, tokens["viewer"])
    r = client.get(f"/compare/benchmarks?id={a.benchmark_id}&id={b.benchmark_id[:16]}")
    assert r.status_code == 200
    assert a11y(r.text).text_of("perf-verdict") == "not comparable: threads 1 vs 4"
    timings = _table(r.text, "compare-perf-table")
    q = a.latency.percentiles
    low, high = a.throughput_ci
    assert timings["A"][1:5] == [
        f"{a.throughput_samples_per_second:,.1f} img/s [{low:,.1f}, {high:,.1f}]",
        f"{q['p50'].value:.2f} ms",
        f"{q['p90'].value:.2f} ms",
        f"{q['p99'].value:.2f} ms",
    ]
    assert timings["A"][5] == "one query of 1 image (64 queries)"
    assert timings["A"][6] == f"{64 / a.duration_seconds:,.1f} queries/s"
    conditions = _table(r.text, "compare-perf-conditions")
    assert conditions["scenario"][1:] == ["single-stream", "single-stream", "same"]
    assert conditions["load"][1:] == ["1 image a query", "1 image a query", "same"]
    assert conditions["timing"][1] == ("pre-process + infer" if a.settings["timed_preprocess"] else "infer only")
    assert conditions["threads"][1:] == ["1", "4", "differs"]
    heads = _table(r.text, "compare-benchmarks-table")
    assert heads["B"][1] == b.benchmark_id[:12] and heads["A"][3] == "single-stream"
    assert "stack-across" in parse(r.text).tables
    assert_accessible(r.text)


def test_the_benchmarks_page_picks_benchmarks_to_compare(
    service_app: Any, tokens: dict[str, str], benchmarks: list[Any]
) -> None:
    for rec in benchmarks:
        service_app.state.store.save_benchmark(rec)
    html = logged_in(service_app, tokens["viewer"]).get("/benchmarks").text
    assert '<form id="compare-form" class="compare-pick" method="get" action="/compare/benchmarks"' in html
    for rec in benchmarks:
        assert f'<input type="checkbox" form="compare-form" name="id" value="{rec.benchmark_id}"' in html
    assert_accessible(html)


def test_hostile_benchmark_compare_queries(service_app: Any, tokens: dict[str, str], benchmarks: list[Any]) -> None:
    service_app.state.store.save_benchmark(benchmarks[0])
    client = logged_in(service_app, tokens["viewer"])
    one = benchmarks[0].benchmark_id
    many = "&".join(f"id={one[:20]}{i:02d}" for i in range(13))
    r = client.get(f"/compare/benchmarks?{many}")
    assert r.status_code == 422 and "at most 12 benchmarks, got 13" in r.text
    r = client.get(f"/compare/benchmarks?id={one}&id={'0' * 64}")
    assert r.status_code == 404 and "0000000000" in r.text
    assert client.get(f"/compare/benchmarks?id={one}").status_code == 400
    assert client.get(f"/compare/benchmarks?id={one}&id={one[:12]}").status_code == 400  # the same one twice
    r = client.get(f"/compare/benchmarks?id={one}&run={one}")
    assert r.status_code == 400 and "unknown query parameter &#39;run&#39; (allowed: id)" in r.text
    r = client.get(f"/compare/benchmarks?id={one}&id={'a' * 101}")
    assert r.status_code == 422 and "at most 100 characters, got 101" in r.text
    anonymous = client.__class__(service_app)
    assert anonymous.get(f"/compare/benchmarks?id={one}&id={one}", follow_redirects=False).status_code == 303


# --- thumbnails that open larger, boxes named by class (item 2) -----------------------------------------------


def test_flipped_samples_open_larger(service_app: Any, tokens: dict[str, str], stored: dict[str, Any]) -> None:
    from repliscope.service.web import samples

    a, b = stored["cls_a"], stored["cls_b"]
    client = logged_in(service_app, tokens["viewer"])
    html = client.get(f"/compare?a={a.run_id}&b={b.run_id}").text
    large = f"/runs/{a.run_id}/samples/7/thumbnail.png?size=large"  # the one flip: imagenet_07_609.jpg
    assert f'<a class="thumb-link" href="{large}" title="Open sample imagenet_07_609.jpg larger">' in html
    png = client.get(large)
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    with Image.open(io.BytesIO(png.content)) as im:
        assert max(im.size) == samples.LARGE_PX


def test_detection_compare_shows_the_differing_images_with_class_names(
    service_app: Any, tokens: dict[str, str], stored: dict[str, Any]
) -> None:
    from repliscope.datasets.synthetic_detection import CATEGORIES
    from repliscope.service.web import samples

    a, b = stored["det_a"], stored["det_b"]
    names = samples.detection_names(a)
    assert names == dict(CATEGORIES)
    client = logged_in(service_app, tokens["viewer"])
    r = client.get(f"/compare?a={a.run_id}&b={b.run_id}")
    assert r.status_code == 200
    first = a.samples[0]
    rows = _table(r.text, "differing-boxes")
    kept = sorted((d for d in first.detections or [] if d.score >= samples.DRAW_MIN_SCORE), key=lambda d: -d.score)
    expected_a = ", ".join(f"{names[d.class_id]} {d.score:.2f}" for d in kept)
    truth = ", ".join(names[c] for c in a.ground_truth.samples[0].classes)
    assert rows[first.sample_id][1:] == ["", "", truth, expected_a, "none"]
    assert expected_a and all(name in names.values() for name in expected_a.replace(",", "").split()[::2])
    for run in (a.run_id, b.run_id):
        link = f"/runs/{run}/samples/0/thumbnail.png?size=large"
        assert f'<a class="thumb-link" href="{link}"' in r.text
        assert client.get(link).status_code == 200
    assert 'id="min-score"' in r.text and 'data-samples-table="differing-boxes"' in r.text
    assert '<script src="/static/samples.js"></script>' in r.text
    assert samples.box_label(kept[0], names) == f"{names[kept[0].class_id]} {kept[0].score:.2f}"
    assert samples.box_label(kept[0], {}) == f"class {kept[0].class_id} {kept[0].score:.2f}"
    assert_accessible(r.text)


def test_the_cli_refuses_a_compare_of_mixed_tasks(stored: dict[str, EvaluationRecord], tmp_path: Any) -> None:
    """``repliscope runs compare``: the same refusal as an input error (``error: ...``, exit code 2), no table."""
    from typer.testing import CliRunner

    from repliscope.cli.main import app
    from repliscope.store.repository import RunStore

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with RunStore(url) as store:
        for key in ("cls_a", "det_a"):
            store.save(stored[key])
    cls_a, det_a = stored["cls_a"].run_id, stored["det_a"].run_id
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["runs", "compare", cls_a, det_a, "--db", url])
    assert result.exit_code == 2
    assert "error: runs of different tasks cannot be compared (image_classification and object_detection)" in (
        result.output
    )
    assert "Metric deltas" not in result.output and "top1_flips" not in result.output
