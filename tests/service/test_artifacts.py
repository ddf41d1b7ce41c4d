"""Issue 36 item 8, the artifact view: ``/runs/{id}/artifacts`` lists what a run has (reports, samples, record,
trace, its sweep's report and result), ``/diffs/{id}/artifacts`` a diff's (result, Markdown report, figure), each
with its size, media type and links; each is served from the store with its media type, a Content-Disposition and
nosniff, to a viewer; a hostile id or name (``../../etc/passwd``, URL-encoded, too long) is a 404, and no page or URL
names a path of the server's disk."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import pytest

from tests.service.test_web_pages import a11y, assert_accessible, logged_in

SECRET_DIR = "/srv/secret-models/lite0"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A store with a sweep's reference run (a server path in its options, a stored trace), its sweep, a diff with
    a figure and one without; tokens of each role. One app for the module (cheap tests)."""
    from fastapi.testclient import TestClient

    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.accounts import create_token
    from repliscope.store.diffs import store_diff
    from repliscope.tracing.chrome import to_chrome
    from tests.report.factories import SWEEP_ID, VARIANT_RUN_IDS, sweep, sweep_records
    from tests.service.test_benchmarks_and_result_links import lite0_benchmark
    from tests.tracing.test_summary_compare import _ort

    root = tmp_path_factory.mktemp("artifacts")
    app = create_app(ServiceConfig(db_url=f"sqlite:///{root / 'runs.db'}", cache_dir=root / "cache"))
    store = app.state.store
    admin, _ = first_start(store)
    store.save_sweep(sweep())
    run_id = VARIANT_RUN_IDS["reference"]
    for r in sweep_records().values():
        if r.run_id == run_id:
            r.options["model_path"] = f"{SECRET_DIR}/model.onnx"
        store.save(r)
    doc = to_chrome(_ort(), 0, thread_names={}, metadata={"repliscope_trace_level": "framework"}, pid=1)
    store.save_trace(run_id, "framework", doc)
    store.save_trace(SWEEP_ID, "framework", doc)
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 64
    diff_id = store_diff(store, _task_diff(), manifest_name="efficientnet-lite0", figure=png)
    plain_diff = store_diff(store, _task_diff(), manifest_name="efficientnet-lite0")
    bench = lite0_benchmark()  # a fake runtime's latencies: ~1 s, the one benchmark record the suite builds
    store.save_benchmark(bench)
    store.save_trace(bench.benchmark_id, "framework", doc)
    tokens = {
        "viewer": create_token(store, "v", "viewer"),
        "admin": admin,
    }
    try:
        with TestClient(app):
            yield {
                "app": app,
                "tokens": tokens,
                "run": run_id,
                "sweep": SWEEP_ID,
                "diff": diff_id,
                "plain_diff": plain_diff,
                "png": png,
                "bench": bench.benchmark_id,
            }
    finally:
        app.state.executor.shutdown(wait=True)
        app.state.cluster.close()


@pytest.fixture(scope="module")
def viewer(seeded: dict[str, Any]) -> Any:
    return logged_in(seeded["app"], seeded["tokens"]["viewer"])


def _task_diff() -> dict[str, Any]:
    from repliscope.diff.task_level import FlippedSample, McNemar, TaskDiffResult

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


def _rows(html: str) -> dict[str, tuple[str, str, list[str]]]:
    """The artifacts table: name -> (size, media type, its links)."""
    out = {}
    for body in re.findall(r'<tr id="artifact-[^"]+">(.*?)</tr>', html, re.S):
        name = re.search(r"<code>([^<]+)</code></th>", body)
        cells = re.findall(r'<td class="num">([^<]+)</td>\s*<td><code>([^<]+)</code></td>', body)
        assert name is not None and cells, body
        out[name.group(1)] = (cells[0][0], cells[0][1], re.findall(r'href="([^"]+)"', body))
    return out


def test_a_runs_artifacts_are_listed_with_size_type_and_links(seeded: dict[str, Any], viewer: Any) -> None:
    run = seeded["run"]
    r = viewer.get(f"/runs/{run}/artifacts")
    assert r.status_code == 200
    assert_accessible(r.text)
    rows = _rows(r.text)
    assert list(rows) == [
        "report.html",
        "report.md",
        "samples.csv",
        "samples.json",
        "record.json",
        "trace.json",
        "trace.otlp.json",
        "sweep-report.html",
        "sweep.json",
        "sweep-trace.json",
        "sweep-trace.otlp.json",
    ]
    assert rows["samples.csv"][1] == "text/csv; charset=utf-8" and rows["record.json"][1] == "application/json"
    base = f"/runs/{run}/artifacts"
    assert rows["report.html"][2] == [f"{base}/report.html", f"{base}/report.html?download=1"]
    assert rows["samples.csv"][2] == [f"{base}/samples.csv?download=1"]  # a browser does not show CSV: download only
    # the listing builds nothing: a size shows once an artifact was built (within KEPT_SECONDS)
    assert all(size == "made when opened" or re.fullmatch(r"[\d.]+ (B|KiB|MiB)", size) for size, _, _ in rows.values())
    downloads = {name: viewer.get(links[-1]) for name, (_, _, links) in rows.items()}
    again = _rows(viewer.get(f"/runs/{run}/artifacts").text)  # built now: each has its size
    for name, (size, _, _) in again.items():
        got = downloads[name]
        assert got.status_code == 200, name
        assert re.fullmatch(r"\d+ B|\d+\.\d KiB|\d+\.\d\d MiB", size), (name, size)
        if size.endswith(" B"):
            assert int(size.split()[0]) == len(got.content), name
        else:
            unit = 1024 if "KiB" in size else 1024 * 1024
            assert abs(float(size.split()[0]) * unit - len(got.content)) <= 0.06 * unit, name
    assert f'href="/runs/{run}"' in r.text and SECRET_DIR not in r.text
    # a sweep's id leads to its reference run's artifacts
    moved = viewer.get(f"/runs/{seeded['sweep']}/artifacts", follow_redirects=False)
    assert moved.status_code == 303 and moved.headers["location"] == f"{base}"


def test_each_artifact_is_served_with_its_type_disposition_and_nosniff(seeded: dict[str, Any], viewer: Any) -> None:
    base = f"/runs/{seeded['run']}/artifacts"
    report = viewer.get(f"{base}/report.html")
    assert report.headers["content-type"] == "text/html; charset=utf-8"
    assert report.headers["content-disposition"] == f'inline; filename="run-{seeded["run"]}-report.html"'
    assert report.headers["x-content-type-options"] == "nosniff"
    assert report.headers["content-security-policy"].startswith("sandbox; default-src 'none'")
    assert "<script" not in report.text and "Per-layer time" in report.text
    download = viewer.get(f"{base}/samples.csv?download=1")
    assert download.headers["content-disposition"].startswith("attachment; filename=")
    rows = list(csv.reader(io.StringIO(download.text)))
    assert rows[0][:3] == ["position", "sample_id", "label"] and len(rows) == 21  # the header and 20 samples
    record = json.loads(viewer.get(f"{base}/record.json").text)
    assert record["run_id"] == seeded["run"] and len(record["samples"]) == 20
    trace = json.loads(viewer.get(f"{base}/trace.json").text)
    assert trace["traceEvents"]
    sweep = json.loads(viewer.get(f"{base}/sweep.json").text)
    assert sweep["sweep_id"] == seeded["sweep"]
    markdown = viewer.get(f"{base}/report.md")
    assert markdown.headers["content-type"] == "text/markdown; charset=utf-8"
    assert markdown.headers["content-disposition"].startswith("attachment;")  # no view for Markdown
    assert viewer.get(f"{base}/record.json?download=2").status_code == 422


def test_server_paths_are_hidden_below_admin(seeded: dict[str, Any], viewer: Any) -> None:
    base = f"/runs/{seeded['run']}/artifacts"
    for name in ("record.json", "report.html", "report.md"):
        assert SECRET_DIR not in viewer.get(f"{base}/{name}").text, name
    admin = logged_in(seeded["app"], seeded["tokens"]["admin"])
    assert f"{SECRET_DIR}/model.onnx" in admin.get(f"{base}/record.json").text


def test_a_benchmarks_artifacts_are_its_record_and_trace(seeded: dict[str, Any], viewer: Any) -> None:
    bench = seeded["bench"]
    r = viewer.get(f"/runs/{bench}/artifacts")
    assert r.status_code == 200 and list(_rows(r.text)) == ["benchmark.json", "trace.json", "trace.otlp.json"]
    assert f'href="/benchmarks/{bench}"' in r.text
    got = viewer.get(f"/runs/{bench}/artifacts/benchmark.json?download=1")
    assert json.loads(got.text)["benchmark_id"] == bench
    assert got.headers["content-disposition"] == f'attachment; filename="benchmark-{bench[:32]}-benchmark.json"'
    assert viewer.get(f"/runs/{bench}/artifacts/report.html").status_code == 404  # a run's, not a benchmark's


def test_the_run_and_diff_pages_link_their_artifacts(seeded: dict[str, Any], viewer: Any) -> None:
    run = viewer.get(f"/runs/{seeded['run']}").text
    assert f'id="run-artifacts" href="/runs/{seeded["run"]}/artifacts"' in run
    diff = viewer.get(f"/diffs/{seeded['diff']}").text
    assert f'id="diff-artifacts" href="/diffs/{seeded["diff"]}/artifacts"' in diff
    assert "its result, report and figure as files" in diff


def test_a_diffs_artifacts_hold_its_result_report_and_figure(seeded: dict[str, Any], viewer: Any) -> None:
    r = viewer.get(f"/diffs/{seeded['diff']}/artifacts")
    assert r.status_code == 200
    assert_accessible(r.text)
    assert list(_rows(r.text)) == ["diff.json", "diff-report.md", "figure.png"]
    figure = viewer.get(f"/diffs/{seeded['diff']}/artifacts/figure.png")
    assert figure.content == seeded["png"] and figure.headers["content-type"] == "image/png"
    assert json.loads(viewer.get(f"/diffs/{seeded['diff']}/artifacts/diff.json").text)["diff_id"] == seeded["diff"]
    plain = viewer.get(f"/diffs/{seeded['plain_diff']}/artifacts")
    assert list(_rows(plain.text)) == ["diff.json", "diff-report.md"]
    assert viewer.get(f"/diffs/{seeded['plain_diff']}/artifacts/figure.png").status_code == 404
    assert a11y(r.text).headings == [1]


@pytest.mark.parametrize(
    "path",
    [
        "/runs/..%2F..%2Fetc%2Fpasswd/artifacts",
        "/runs/%2e%2e%2f%2e%2e%2fetc%2fpasswd/artifacts",
        "/runs/..%252F..%252Fetc%252Fpasswd/artifacts",
        "/runs/{run}/artifacts/..%2F..%2F..%2Fetc%2Fpasswd",
        "/runs/{run}/artifacts/%2e%2e%2fservice.db",
        "/runs/{run}/artifacts/runs.db",
        "/runs/{run}/artifacts/report.html%00.png",
        "/runs/{run}/artifacts/REPORT.HTML",
        "/runs/{long}/artifacts",
        "/runs/no-such-run/artifacts/report.html",
        "/diffs/..%2Fruns.db/artifacts",
        "/diffs/{diff}/artifacts/..%2F..%2Fetc%2Fpasswd",
    ],
)
def test_a_hostile_id_or_name_is_a_404(seeded: dict[str, Any], viewer: Any, path: str) -> None:
    url = path.format(run=seeded["run"], diff=seeded["diff"], long="a" * 101)
    r = viewer.get(url)
    assert r.status_code == 404, (url, r.status_code)
    assert "root:" not in r.text and "SQLite format" not in r.text


def test_artifacts_need_a_signed_in_viewer(seeded: dict[str, Any]) -> None:
    from fastapi.testclient import TestClient

    anonymous = TestClient(seeded["app"])
    r = anonymous.get(f"/runs/{seeded['run']}/artifacts/record.json", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")


def test_a_replaced_trace_is_served_once_the_kept_copy_expires(
    seeded: dict[str, Any], viewer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built artifacts are kept a short while (the listing's sizes make the download free), never for good: a trace
    stored again under the same id is what the next build serves."""
    from repliscope.service.web import artifacts

    store = seeded["app"].state.store
    url = f"/runs/{seeded['run']}/artifacts/trace.json"
    before = viewer.get(url).text
    store.save_trace(seeded["run"], "framework", {"traceEvents": [], "replaced": True})
    assert viewer.get(url).text == before  # the kept copy, within KEPT_SECONDS
    monkeypatch.setattr(artifacts, "KEPT_SECONDS", 0.0)
    assert json.loads(viewer.get(url).text) == {"traceEvents": [], "replaced": True}


HOSTILE_NAME = f"<script>alert(1)</script> {SECRET_DIR}/model.onnx"


def test_a_trace_as_otlp_json_is_served_as_the_chrome_trace_is(seeded: dict[str, Any], viewer: Any) -> None:
    """A stored trace whose span name holds markup and a server path, as OTLP/JSON: application/json, nosniff,
    inline or attached; below admin the path is hidden in both files alike, the markup stays inert text of a JSON
    string; the admin's file shows the path and has the viewer's ids; protobuf's parser reads it."""
    from repliscope.tracing.chrome import to_chrome
    from repliscope.tracing.spans import SpanRecord
    from tests.report.factories import record
    from tests.tracing.test_otlp_json import attributes_of, parse_otlp, spans_of

    store = seeded["app"].state.store
    run_id = "otlp-hostile-0001"
    store.save(record(run_id=run_id))
    spans = [
        SpanRecord("run", "application", 0, 9_000, 1, {"manifest": f"{SECRET_DIR}/lite0.yaml"}),
        SpanRecord(HOSTILE_NAME, "model", 1_000, 5_000, 1, {"<img src=x onerror=alert(1)>": "<b>bold</b>\nline 2"}),
    ]
    meta = {"repliscope_trace_level": "model", "service": "repliscope", "origin_ns": 10, "epoch_offset_ns": 5}
    store.save_trace(run_id, "model", to_chrome(spans, 0, thread_names={1: SECRET_DIR}, metadata=meta, pid=1))
    base = f"/runs/{run_id}/artifacts"
    assert "trace.otlp.json" in _rows(viewer.get(base).text)
    otlp = viewer.get(f"{base}/trace.otlp.json")
    chrome = viewer.get(f"{base}/trace.json")
    for got in (otlp, chrome):
        assert got.status_code == 200 and got.headers["content-type"] == "application/json"
        assert got.headers["x-content-type-options"] == "nosniff"
        assert SECRET_DIR not in got.text and "…/lite0/model.onnx" in got.text
    assert otlp.headers["content-disposition"] == f'inline; filename="run-{run_id}-trace.otlp.json"'
    attached = viewer.get(f"{base}/trace.otlp.json?download=1").headers["content-disposition"]
    assert attached == f'attachment; filename="run-{run_id}-trace.otlp.json"'
    assert otlp.content.endswith(b"\n") and otlp.content.count(b"\n") == 1  # JSON Lines: one request a line
    doc = json.loads(otlp.text)
    parse_otlp(doc)
    names = [e["name"] for e in json.loads(chrome.text)["traceEvents"] if e["ph"] == "X"]
    assert [s["name"] for s in spans_of(doc)] == names == ["run", "<script>alert(1)</script> …/lite0/model.onnx"]
    hostile = spans_of(doc)[1]
    assert attributes_of(hostile)["<img src=x onerror=alert(1)>"] == "<b>bold</b>\nline 2"  # text, as in trace.json
    assert attributes_of(spans_of(doc)[0])["manifest"] == "…/lite0/lite0.yaml"
    assert (hostile["startTimeUnixNano"], hostile["endTimeUnixNano"]) == ("1015", "5015")
    admin = json.loads(logged_in(seeded["app"], seeded["tokens"]["admin"]).get(f"{base}/trace.otlp.json").text)
    assert spans_of(admin)[1]["name"] == HOSTILE_NAME
    ids = [(s["traceId"], s["spanId"], s.get("parentSpanId")) for s in spans_of(doc)]
    assert [(s["traceId"], s["spanId"], s.get("parentSpanId")) for s in spans_of(admin)] == ids
    assert ids[1][2] == ids[0][1]


def test_without_the_tracing_extra_only_the_chrome_trace_is_listed(
    seeded: dict[str, Any], viewer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from repliscope.tracing import otlp_json

    monkeypatch.setattr(otlp_json, "available", lambda: False)
    bench = seeded["bench"]
    assert list(_rows(viewer.get(f"/runs/{bench}/artifacts").text)) == ["benchmark.json", "trace.json"]
    missing = viewer.get(f"/runs/{bench}/artifacts/trace.otlp.json")
    assert missing.status_code == 404 and "has no artifact &#39;trace.otlp.json&#39;" in missing.text


def test_the_listing_builds_no_otlp_trace_and_shows_its_size_once_built() -> None:
    """An OTLP/JSON trace is rendered span by span (about 2 s per 10,000 spans): listing an object's artifacts
    does not build it (nor any other), a download does, and the listing then shows its size."""
    from repliscope.service.web import artifacts

    calls: list[str] = []

    def otlp() -> bytes:
        calls.append("otlp")
        return b"{}\n"

    builders: dict[str, artifacts.Builder] = {"trace.json": lambda: b"{}", "trace.otlp.json": otlp}
    target = artifacts.Target("run", "listing-probe-0001", "/runs/p", "/runs/p/artifacts", builders)
    assert {a.name: a.size_text for a in artifacts.listing(target, False)} == {
        "trace.json": "made when opened",
        "trace.otlp.json": "made when opened",
    }
    assert calls == []
    assert artifacts.built(target, "trace.json", False) == b"{}"
    assert artifacts.built(target, "trace.otlp.json", False) == b"{}\n" and calls == ["otlp"]
    assert [a.size_text for a in artifacts.listing(target, False)] == ["2 B", "3 B"] and calls == ["otlp"]
