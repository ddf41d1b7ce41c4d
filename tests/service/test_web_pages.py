"""The web UI (``repliscope.service.web``) through ``create_app`` with real tokens and stored records: login and its
cookie, every page rendered with real values, the ids the browser tests use, charts that decode, the compare page's
reasons, the wizard posting through the API's executor, accessibility basics and offline assets."""

from __future__ import annotations

import re
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from repliscope.report.figures import decode_png_b64
from tests.report.htmlparse import ReportParser
from tests.service.conftest import WebClient
from tests.store.records import FOOLBOX_IDENTITY, TOP1_A, TOP1_B, make_record

RUN_A = "f0" * 16
RUN_B = "f1" * 16
LITE0 = Path(__file__).resolve().parents[2] / "examples" / "efficientnet-lite0.yaml"


def parse(html: str) -> ReportParser:
    p = ReportParser()
    p.feed(html)
    return p


class A11yParser(HTMLParser):
    """Headings in order, the html lang, form controls and the labels pointing at them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lang: str | None = None
        self.headings: list[int] = []
        self.controls: list[dict[str, str]] = []
        self.label_for: set[str] = set()
        self._open: list[tuple[str, str | None]] = []
        self.by_id: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "html":
            self.lang = a.get("lang")
        if re.fullmatch(r"h[1-6]", tag):
            self.headings.append(int(tag[1]))
        if tag in ("input", "select", "textarea") and a.get("type") != "hidden":
            self.controls.append(a)
        if tag == "label" and "for" in a:
            self.label_for.add(a["for"])
        if tag in _VOID:
            return
        self._open.append((tag, a.get("id")))
        if a.get("id"):
            self.by_id[a["id"]] = ""

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        """Text goes to every open element with an id (whitespace runs collapsed at the end)."""
        for _, element_id in self._open:
            if element_id:
                self.by_id[element_id] += data

    def text_of(self, element_id: str) -> str:
        return " ".join(self.by_id[element_id].split())


_VOID = {"img", "br", "meta", "link", "hr", "input", "source"}


def a11y(html: str) -> A11yParser:
    p = A11yParser()
    p.feed(html)
    return p


def assert_accessible(html: str) -> None:
    p = a11y(html)
    assert p.lang == "en"
    assert p.headings and p.headings[0] == 1 and p.headings.count(1) == 1
    for before, after in zip(p.headings, p.headings[1:], strict=False):
        assert after <= before + 1, f"heading level jumps from h{before} to h{after}"
    for control in p.controls:
        assert control.get("id") in p.label_for, f"control without a label: {control}"
    assert '<meta name="viewport"' in html


@pytest.fixture
def web(service_app: Any, tokens: dict[str, str]) -> dict[str, Any]:
    store = service_app.state.store
    store.save(make_record(RUN_A, TOP1_A))
    b = make_record(RUN_B, TOP1_B, runtime="onnxruntime")
    b.runtime["framework_version"] = "1.32.0"
    b.pipeline["preprocess"][1]["interpolation"] = "bicubic"
    store.save(b)
    return {"app": service_app, "store": store, "tokens": tokens}


def logged_in(app: Any, token: str) -> TestClient:
    client = WebClient(app)
    r = client.post("/login", data={"token": token, "next": "/runs"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/runs"
    return client


# --- login ----------------------------------------------------------------------------------------------------


def test_pages_redirect_to_login_without_a_token(web: dict[str, Any]) -> None:
    client = TestClient(web["app"])
    for path in ("/", "/runs", f"/runs/{RUN_A}", "/new", f"/compare?a={RUN_A}&b={RUN_B}"):
        r = client.get(path, follow_redirects=False)
        assert r.status_code == 303, path
        assert r.headers["location"].startswith("/login?next=%2F")
    page = client.get("/login")
    assert page.status_code == 200
    ids = parse(page.text).ids
    assert "token" in ids and "login" in ids
    assert_accessible(page.text)


def test_login_sets_an_httponly_strict_cookie_and_logout_clears_it(web: dict[str, Any]) -> None:
    client = WebClient(web["app"])
    r = client.post("/login", data={"token": web["tokens"]["viewer"], "next": "/"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith("repliscope_token=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    page = client.get("/")
    assert page.status_code == 200 and "test-viewer (viewer)" in page.text
    out = client.post("/logout", follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"] == "/login"
    assert 'repliscope_token=""' in out.headers["set-cookie"] or "Max-Age=0" in out.headers["set-cookie"]
    assert client.get("/", follow_redirects=False).status_code == 303


def test_login_refuses_bad_tokens_and_open_redirects(web: dict[str, Any]) -> None:
    client = WebClient(web["app"])
    bad = client.post("/login", data={"token": "rs_not-a-token", "next": "/"}, follow_redirects=False)
    assert bad.status_code == 401 and "Unknown or revoked token." in bad.text
    assert "set-cookie" not in bad.headers
    empty = client.post("/login", data={"token": "  "}, follow_redirects=False)
    assert empty.status_code == 400 and "Enter a token" in empty.text
    r = client.post(
        "/login", data={"token": web["tokens"]["viewer"], "next": "//evil.example/x"}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"] == "/"


# --- models and runs ------------------------------------------------------------------------------------------


def test_models_page_lists_claims_and_the_latest_verdict_per_runtime(web: dict[str, Any]) -> None:
    client = logged_in(web["app"], web["tokens"]["viewer"])
    html = client.get("/").text
    p = parse(html)
    table = p.tables["models-table"]
    assert len(table.rows) == 1
    name, versions, claims, cells = table.rows[0]
    assert name == "efficientnet-lite0" and versions == "1.0.0"
    assert claims == "top1 75.30 % on imagenet-1k/val"
    assert "onnxruntime · foolbox_imagenet" in cells and "not comparable" in cells  # per runtime and dataset
    assert "/models/efficientnet-lite0" in p.anchors
    # both runs are onnxruntime on one dataset, neither judged: the cell links the newest (a tie: the larger id)
    assert f"/runs/{RUN_B}" in p.anchors
    assert_accessible(html)
    model = client.get("/models/efficientnet-lite0")
    assert model.status_code == 200
    assert len(parse(model.text).tables["runs-table"].rows) == 2
    assert_accessible(model.text)
    assert client.get("/models/no-such-model").status_code == 404


def test_runs_page_filters_sorts_and_pages(web: dict[str, Any]) -> None:
    client = logged_in(web["app"], web["tokens"]["viewer"])
    html = client.get("/runs?sort=-top1").text
    rows = parse(html).tables["runs-table"].rows
    assert [r[0] for r in rows] == [RUN_B[:12], RUN_A[:12]]
    assert rows[0][5:8] == ["onnxruntime 1.32.0", "AMD EPYC", "foolbox_imagenet"]
    assert rows[0][9] == "top1 95.00 % [76.39, 99.11] %" and rows[1][9] == "top1 89.47 % [68.61, 97.06] %"
    assert rows[0][10] == "not comparable"
    assert rows[0][11] == "3f1c0000"  # the manifest sha256's first 8 characters (hidden by default)
    assert "2 runs; page 1 of 1." in html
    assert_accessible(html)
    only_b = parse(client.get("/runs?framework_version=1.32.0&hardware=AMD+EPYC").text).tables["runs-table"].rows
    assert [r[0] for r in only_b] == [RUN_B[:12]]
    dated = parse(client.get("/runs?created_from=2026-11-21&created_to=2026-11-21").text).tables["runs-table"]
    assert len(dated.rows) == 2
    before = parse(client.get("/runs?created_to=2026-11-20").text).tables["runs-table"].rows
    assert before == [["No run matches."]]
    none = client.get("/runs?kind=pitfall-variant").text
    assert parse(none).tables["runs-table"].rows == [["No run matches."]]
    paged = client.get("/runs?page_size=25&page=2").text
    assert "page 2 of 1" in paged and parse(paged).tables["runs-table"].rows == [["No run matches."]]
    bad = client.get("/runs?page=0&sort=fastest&created_from=21.11.2026")
    assert bad.status_code == 422
    text = unescape(bad.text)
    assert "sort must be one of created_at, -created_at, top1, -top1," in text and "not 'fastest'" in text
    assert "page must be a whole number from 1 to 1,000,000, not '0'" in text
    assert "created_from must be a date YYYY-MM-DD, not '21.11.2026'" in text
    verdict = client.get("/runs?verdict=maybe")
    assert verdict.status_code == 422 and "verdict: verdict 'maybe' is not a verdict" in unescape(verdict.text)


def test_run_page_shows_the_verdict_charts_metrics_and_provenance(web: dict[str, Any]) -> None:
    client = logged_in(web["app"], web["tokens"]["viewer"])
    r = client.get(f"/runs/{RUN_A[:10]}")
    assert r.status_code == 200
    p = parse(r.text)
    assert a11y(r.text).text_of("verdict") == "not comparable"
    charts = [img for img in p.images if "chart" in img.get("class", "").split()]
    assert len(charts) == 2  # the claim vs measured interval plot and the batch latency chart
    for img in charts:
        assert decode_png_b64(img["src"]).startswith(b"\x89PNG")
    metrics = p.tables["metrics-table"].rows
    assert metrics[0][:2] == ["top1", "89.47 %"]
    text = r.text
    for needle in (
        "3f1c" + "0" * 56 + "9a2b",
        "onnxruntime 1.31.1",
        FOOLBOX_IDENTITY,
        make_record(RUN_A, TOP1_A).result_hash,
        "imagenet_19_305.jpg",
        "SampleError: image file is truncated",
    ):
        assert needle in text
    assert f"/api/v1/runs/{RUN_A}/report" in p.anchors
    assert_accessible(text)
    missing = client.get("/runs/ffffffffff")
    assert missing.status_code == 404 and "unknown run id" in missing.text


def test_compare_page_says_why_two_runs_differ(web: dict[str, Any]) -> None:
    client = logged_in(web["app"], web["tokens"]["viewer"])
    r = client.get(f"/compare?a={RUN_A}&b={RUN_B}")
    assert r.status_code == 200
    p = parse(r.text)
    table = p.tables["compare-table"].rows
    assert table[0][0] == "top1" and table[0][5] == "+5.53 pp" and table[0][8] == "+5.26 pp"
    assert "McNemar exact test on the 19 samples both evaluated: b=0, c=1, p=1 (not significant at 0.05)" in r.text
    why = a11y(r.text).text_of("compare-why")
    assert "The pipelines differ at preprocess 2." in why
    assert "runtime.framework_version" in why and "1 sample changed top-1 class." in why
    pipeline = p.tables["pipeline-diff"]
    differing = [
        row for row, attrs in zip(pipeline.rows, pipeline.row_attrs, strict=True) if attrs.get("class") == "differs"
    ]
    assert differing == [
        [
            "preprocess 2",
            "resize(size=256, interpolation=bilinear, antialias=True)",
            "resize(size=256, interpolation=bicubic, antialias=True)",
            "differs",
        ]
    ]
    stack = p.tables["stack-diff"].rows
    assert stack[0] == ["runtime.framework_version", "1.31.1", "1.32.0", "differs"]
    assert "imagenet_07_609.jpg" in r.text
    thumbs = [img for img in p.images if img.get("class") == "thumb"]
    assert len(thumbs) == 1 and decode_png_b64(thumbs[0]["src"])  # the foolbox image re-loads: a thumbnail
    assert_accessible(r.text)
    assert client.get(f"/compare?a={RUN_A}").status_code == 400
    assert client.get(f"/compare?a={RUN_A}&b=ffffffffff").status_code == 404


def test_compare_without_the_dataset_shows_sample_ids_only(web: dict[str, Any]) -> None:
    store = web["store"]
    store.save(make_record("c3" * 16, TOP1_A, dataset_identity="e" * 64))
    store.save(make_record("d4" * 16, TOP1_B, dataset_identity="e" * 64))
    client = logged_in(web["app"], web["tokens"]["viewer"])
    r = client.get(f"/compare?a={'c3' * 16}&b={'d4' * 16}")
    assert "does not re-load with the record's identity here: sample ids only" in unescape(r.text)
    assert "imagenet_07_609.jpg" in r.text
    assert not [img for img in parse(r.text).images if img.get("class") == "thumb"]
    assert "The pipelines and the stacks (runtime, software, hardware) are identical." in r.text


# --- wizard and jobs ------------------------------------------------------------------------------------------


class RecordingExecutor:
    """Takes jobs without running them (the wizard test checks what reaches the executor)."""

    def __init__(self) -> None:
        self.jobs: list[Any] = []

    def submit(self, job: Any) -> str:
        self.jobs.append(job)
        return str(job.job_id)

    def cancel(self, job_id: str) -> bool:
        return False

    def status(self, job_id: str) -> str | None:
        return "queued"

    def shutdown(self, wait: bool = True) -> None:
        return None


def _store_manifest(web: dict[str, Any]) -> str:
    from repliscope.store.service_tables import put_manifest

    put_manifest(web["store"], "efficientnet-lite0", "1.0.0", LITE0.read_text(encoding="utf-8"), uploaded_by="test")
    return "efficientnet-lite0@1.0.0"


def test_wizard_posts_a_job_through_the_executor(web: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    app = web["app"]
    real = app.state.executor
    recording = RecordingExecutor()
    monkeypatch.setattr(app.state, "executor", recording)
    ref = _store_manifest(web)
    client = logged_in(app, web["tokens"]["runner"])
    page = client.get("/new")
    assert page.status_code == 200
    ids = parse(page.text).ids
    for needed in ("wizard-manifest", "wizard-runtime", "wizard-dataset", "wizard-kind", "wizard-submit"):
        assert needed in ids
    assert f'<option value="{ref}" data-task="image_classification"' in page.text
    assert '<option value="foolbox_imagenet"' in page.text
    assert_accessible(page.text)
    r = client.post(
        "/new",
        data={
            "task": "image_classification",
            "manifest": ref,
            "runtime": "onnxruntime",
            "threads": "1",
            "dataset": "foolbox_imagenet",
            "limit": "4",
            "kind": "evaluate",
            "scenario": "single-stream",
            "runtime_b": "",
        },
        follow_redirects=False,
    )
    assert r.status_code == 303
    job_id = r.headers["location"].removeprefix("/jobs/")
    [job] = recording.jobs
    assert (job.job_id, job.kind, job.manifest_ref, job.runtime, job.dataset_name) == (
        job_id,
        "evaluate",
        ref,
        "onnxruntime",
        "foolbox_imagenet",
    )
    assert job.options["limit"] == 4 and job.options["threads"] == 1
    page = client.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    j = a11y(page.text)
    assert j.text_of("job-status") == "queued"
    assert "efficientnet-lite0@1.0.0" in page.text and '<script src="/static/job.js">' in page.text
    assert_accessible(page.text)
    assert client.get("/jobs/no-such-job").status_code == 404
    real.shutdown(wait=True)


def test_wizard_refusals_name_the_field(web: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    app = web["app"]
    recording = RecordingExecutor()
    monkeypatch.setattr(app.state, "executor", recording)
    ref = _store_manifest(web)
    runner = logged_in(app, web["tokens"]["runner"])
    form = {"manifest": ref, "runtime": "no-such-runtime", "dataset": "foolbox_imagenet", "kind": "evaluate"}
    r = runner.post("/new", data=form)
    assert r.status_code == 422 and "runtime: unknown runtime &#39;no-such-runtime&#39;" in r.text
    r = runner.post("/new", data={**form, "runtime": "onnxruntime", "dataset": "nowhere"})
    assert r.status_code == 422 and "dataset:" in r.text
    r = runner.post("/new", data={**form, "runtime": "onnxruntime", "limit": "-3"})
    assert r.status_code == 422 and "limit: must be a whole number from 1, not &#39;-3&#39;" in r.text
    viewer = logged_in(app, web["tokens"]["viewer"])
    page = viewer.get("/new")
    assert re.search(r'id="wizard-submit" type="submit"\s+disabled', page.text)
    refused = viewer.post("/new", data={**form, "runtime": "onnxruntime"})
    assert refused.status_code == 403 and "needs the role &#39;runner&#39;" in refused.text
    assert recording.jobs == []


# --- assets ---------------------------------------------------------------------------------------------------


def test_assets_are_served_locally_and_the_css_is_responsive(web: dict[str, Any]) -> None:
    client = TestClient(web["app"])
    css = client.get("/static/style.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert "@media (max-width: 640px)" in css.text and ":focus-visible" in css.text
    js = client.get("/static/job.js")
    assert js.status_code == 200 and '"/jobs/"' in js.text
    assert client.get("/static/../app.py").status_code == 404
    assert client.get("/static/secret.txt").status_code == 404
    viewer = logged_in(web["app"], web["tokens"]["viewer"])
    for path in ("/", "/runs", f"/runs/{RUN_A}", f"/compare?a={RUN_A}&b={RUN_B}", "/login"):
        html = viewer.get(path).text
        assert not re.search(r'(src|href)="(https?:)?//', html), path  # no CDN, nothing remote


# --- sweeps and traces ----------------------------------------------------------------------------------------


def test_a_sweep_variant_shows_the_pitfall_table_and_chart(web: dict[str, Any]) -> None:
    from tests.report.factories import SWEEP_ID, VARIANT_RUN_IDS, sweep, sweep_records

    store = web["store"]
    store.save_sweep(sweep())
    run_id = VARIANT_RUN_IDS["reference"]
    store.save(sweep_records()[run_id])
    client = logged_in(web["app"], web["tokens"]["viewer"])
    r = client.get(f"/runs/{run_id}")
    assert r.status_code == 200
    p = parse(r.text)
    assert f"Pitfalls of sweep {SWEEP_ID[:12]}" in unescape(re.sub(r"<[^>]+>", "", r.text))
    rows = p.tables["pitfalls-table"].rows
    assert [row[0] for row in rows] == [v.name for v in [sweep().reference, *sweep().variants]]
    charts = [img for img in p.images if "chart" in img.get("class", "").split()]
    assert len(charts) == 3  # claim, Δ top-1 per variant, latency
    for img in charts:
        decode_png_b64(img["src"])
    assert_accessible(r.text)


def test_a_stored_trace_adds_the_per_layer_chart(web: dict[str, Any]) -> None:
    from repliscope.tracing.chrome import to_chrome
    from tests.tracing.test_summary_compare import _ort

    doc = to_chrome(_ort(), 0, thread_names={}, metadata={"repliscope_trace_level": "framework"}, pid=1)
    web["store"].save_trace(RUN_A, "framework", doc)
    client = logged_in(web["app"], web["tokens"]["viewer"])
    r = client.get(f"/runs/{RUN_A}")
    assert "<h2>Per-layer time</h2>" in r.text
    charts = [img for img in parse(r.text).images if "chart" in img.get("class", "").split()]
    assert len(charts) == 3 and any(img["alt"].startswith("per-layer time") for img in charts)
    for img in charts:
        decode_png_b64(img["src"])


def test_a_benchmark_page_shows_the_latency_ecdf_and_performance_verdicts(web: dict[str, Any]) -> None:
    from dataclasses import replace

    from repliscope.bench.qsl import QuerySampleLibrary
    from repliscope.bench.scenarios import ScenarioSettings
    from repliscope.datasets import resolve_dataset
    from repliscope.evaluation.run import RunSettings, input_shape, prepare
    from repliscope.manifest.loader import load_manifest
    from tests.bench._fakes import UNIT, perf_claim, run_fake

    loaded = load_manifest(LITE0)
    claims = [perf_claim("latency_p90_ms", 10 * UNIT * 1e3), perf_claim("latency_p90_ms", 1.0)]
    loaded = replace(loaded, manifest=loaded.manifest.model_copy(update={"claims": claims}))
    prepared = prepare(loaded, RunSettings(runtime="onnxruntime", threads=1))
    data = resolve_dataset("foolbox_imagenet")
    qsl = QuerySampleLibrary.load(prepared.pipeline, data.samples, input_shape(prepared), False)
    rec, _ = run_fake(
        (prepared, data, qsl), ScenarioSettings("single-stream", min_duration_s=0.0, min_queries=64, warmup_queries=0)
    )
    web["store"].save_benchmark(rec)
    client = logged_in(web["app"], web["tokens"]["viewer"])
    r = client.get(f"/runs/{rec.benchmark_id}")
    assert r.status_code == 200
    assert a11y(r.text).text_of("verdict") == "latency_p90_ms: consistent; latency_p90_ms: inconsistent"
    charts = [img for img in parse(r.text).images if "chart" in img.get("class", "").split()]
    assert charts and all(decode_png_b64(img["src"]) for img in charts)
    assert "Empirical CDF of every measured query&#39;s latency" in r.text
    assert rec.manifest.sha256 in r.text and str(rec.dataset["identity"]) in r.text
    assert "none: a benchmark records latencies, not predictions" in r.text
    assert_accessible(r.text)


def test_a_finished_job_links_its_run_and_a_sweep_id_leads_to_its_reference(web: dict[str, Any]) -> None:
    from repliscope.store.service_tables import create_job, update_job
    from tests.report.factories import SWEEP_ID, VARIANT_RUN_IDS, sweep, sweep_records

    store = web["store"]
    job = create_job(
        store, "evaluate", "efficientnet-lite0@1.0.0", "onnxruntime", "foolbox_imagenet", {}, created_by="test-runner"
    )
    update_job(store, job.id, status="running", progress_total=20, progress_done=8, append_log="started")
    client = logged_in(web["app"], web["tokens"]["viewer"])
    running = client.get(f"/jobs/{job.id}").text
    assert a11y(running).text_of("job-status") == "running"
    assert a11y(running).text_of("job-progress-text") == "8 / 20" and "job-run-link" not in running
    update_job(store, job.id, status="succeeded", progress_done=20, result_ids=[RUN_A], append_log="done")
    done = client.get(f"/jobs/{job.id}").text
    assert a11y(done).text_of("job-status") == "succeeded"
    assert f'id="job-run-link" href="/runs/{RUN_A}"' in done
    assert "started" in a11y(done).text_of("job-log") and "done" in a11y(done).text_of("job-log")
    store.save_sweep(sweep())
    r = client.get(f"/runs/{SWEEP_ID}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/runs/{sweep().reference.run_id}"
    store.save(sweep_records()[VARIANT_RUN_IDS["reference"]])
    assert client.get(f"/runs/{SWEEP_ID}").status_code == 200
