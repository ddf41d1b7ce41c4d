"""Issue 36 item 1: every result of the web UI is reachable. A job's "Open the result" links the page of its kind's
results (a diff at ``/diffs/{id}``, a benchmark at ``/benchmarks/{id}``, runs and sweeps at ``/runs/{id}``); the
stored benchmarks are listed and browsed like runs (``/benchmarks``, ``/benchmarks/{id}``, ``GET
/api/v1/benchmarks`` and ``/api/v1/benchmarks/{id}``, role viewer, paged and size-bounded)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.test_web_pages import a11y, assert_accessible, logged_in

LITE0 = Path(__file__).resolve().parents[2] / "examples" / "efficientnet-lite0.yaml"


@pytest.fixture(scope="module")
def bench_record() -> Any:
    return lite0_benchmark()


def lite0_benchmark() -> Any:
    """One benchmark record of Lite0 (a fake runtime's latencies, single-stream, 64 queries)."""
    from repliscope.bench.qsl import QuerySampleLibrary
    from repliscope.bench.scenarios import ScenarioSettings
    from repliscope.datasets import resolve_dataset
    from repliscope.evaluation.run import RunSettings, input_shape, prepare
    from repliscope.manifest.loader import load_manifest
    from tests.bench._fakes import UNIT, perf_claim, run_fake

    loaded = load_manifest(LITE0)
    claims = [perf_claim("latency_p90_ms", 10 * UNIT * 1e3)]
    loaded = replace(loaded, manifest=loaded.manifest.model_copy(update={"claims": claims}))
    prepared = prepare(loaded, RunSettings(runtime="onnxruntime", threads=1))
    data = resolve_dataset("foolbox_imagenet")
    qsl = QuerySampleLibrary.load(prepared.pipeline, data.samples, input_shape(prepared), False)
    rec, _ = run_fake(
        (prepared, data, qsl), ScenarioSettings("single-stream", min_duration_s=0.0, min_queries=64, warmup_queries=0)
    )
    return rec


def copies(record: Any, n: int, manifest_name: str) -> list[Any]:
    """``n`` copies of ``record`` under ``manifest_name`` (ids: sha256 of name and number), one minute apart."""
    return [
        record.model_copy(
            update={
                "benchmark_id": hashlib.sha256(f"{manifest_name}-{i}".encode()).hexdigest(),
                "created_at": record.created_at + timedelta(minutes=i),
                "manifest": record.manifest.model_copy(update={"name": manifest_name}),
            }
        )
        for i in range(n)
    ]


@pytest.fixture
def stored(service_app: Any, bench_record: Any) -> dict[str, list[str]]:
    """Three benchmarks of 'lite0' and two of 'other', stored in the service's store."""
    store = service_app.state.store
    ids: dict[str, list[str]] = {}
    for name, n in (("lite0", 3), ("other", 2)):
        records = copies(bench_record, n, name)
        for r in records:
            store.save_benchmark(r)
        ids[name] = [r.benchmark_id for r in reversed(records)]  # newest first
    return ids


# --- the job kinds' result pages ------------------------------------------------------------------------------


def test_every_registered_job_kind_has_a_result_page() -> None:
    from repliscope.job_kinds import kind_names
    from repliscope.service.web.job_pages import RESULT_PAGES, result_page

    assert set(RESULT_PAGES) == set(kind_names())
    assert [result_page(k) for k in ("evaluate", "pitfalls", "bench", "diff")] == [
        "/runs/",
        "/runs/",
        "/benchmarks/",
        "/diffs/",
    ]
    with pytest.raises(ValueError, match=r"job kind 'train' has no result page \(kinds with one: evaluate, pitfalls"):
        result_page("train")


def test_a_job_links_its_result_to_the_page_of_its_kind(service_app: Any, tokens: dict[str, str], stored: Any) -> None:
    from repliscope.store.diffs import store_diff
    from repliscope.store.service_tables import create_job, update_job
    from tests.diff.test_diff_service import _layer_diff
    from tests.store.records import TOP1_A, make_record

    store = service_app.state.store
    run = make_record("ab" * 16, TOP1_A)
    store.save(run)
    diff_id = store_diff(store, _layer_diff(), manifest_name="efficientnet-lite0")
    bench_id = stored["lite0"][0]
    results = {"evaluate": run.run_id, "bench": bench_id, "diff": diff_id}
    client = logged_in(service_app, tokens["viewer"])
    for kind, result in results.items():
        job = create_job(store, kind, "efficientnet-lite0@1.0.0", "onnxruntime", "foolbox_imagenet", {}, created_by="r")
        update_job(store, job.id, status="succeeded", progress_total=1, progress_done=1, result_ids=[result])
        page = client.get(f"/jobs/{job.id}").text
        href = {"evaluate": "/runs/", "bench": "/benchmarks/", "diff": "/diffs/"}[kind] + result
        assert f'id="job-run-link" href="{href}"' in page, kind
        assert f'data-result-base="{href.removesuffix(result)}"' in page  # job.js builds the same link
        landed = client.get(href)
        assert landed.status_code == 200, (kind, landed.text[:300])
        assert result[:12] in landed.text
        assert f'<a href="{href}">{result[:12]}</a>' in client.get("/jobs", params={"kind": kind}).text
    assert "unknown run id" not in client.get(f"/diffs/{diff_id}").text


# --- the benchmarks API ---------------------------------------------------------------------------------------


def test_the_benchmarks_api_lists_pages_filters_and_reads_one(
    client: TestClient, stored: dict[str, list[str]], headers_for: Callable[[str], dict[str, str]], bench_record: Any
) -> None:
    viewer = headers_for("viewer")
    r = client.get("/api/v1/benchmarks", headers=viewer)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["total"] == 5 and body["page"] == 1 and body["page_size"] == 50
    # newest first, ties (the same minute) by id: lite0 #2; lite0 #1, other #1; lite0 #0, other #0
    lite, other = stored["lite0"], stored["other"]
    assert [i["benchmark_id"] for i in body["items"]] == [
        lite[0],
        *sorted([lite[1], other[0]]),
        *sorted([lite[2], other[1]]),
    ]
    first = body["items"][0]
    assert set(first) == {
        "benchmark_id",
        "created_at",
        "manifest_name",
        "runtime",
        "scenario",
        "threads",
        "queries",
        "p90_ms",
        "throughput",
    }
    assert first["scenario"] == "single-stream" and first["queries"] == bench_record.queries
    assert first["runtime"] == bench_record.runtime["runtime"] and first["created_at"].endswith("Z")
    assert first["p90_ms"] == pytest.approx(bench_record.latency.percentiles["p90"].value)
    assert first["throughput"] == pytest.approx(bench_record.throughput_samples_per_second)
    lite0 = client.get("/api/v1/benchmarks", params={"manifest": "lite0", "page_size": 2}, headers=viewer).json()
    assert lite0["total"] == 3 and [i["benchmark_id"] for i in lite0["items"]] == stored["lite0"][:2]
    page2 = client.get(
        "/api/v1/benchmarks", params={"manifest": "lite0", "page_size": 2, "page": 2}, headers=viewer
    ).json()
    assert [i["benchmark_id"] for i in page2["items"]] == stored["lite0"][2:]
    none = client.get("/api/v1/benchmarks", params={"manifest": "nope"}, headers=viewer).json()
    assert none == {"items": [], "total": 0, "page": 1, "page_size": 50}
    one = client.get(f"/api/v1/benchmarks/{stored['other'][0][:12]}", headers=viewer)
    assert one.status_code == 200, one.text
    rec = one.json()
    assert rec["benchmark_id"] == stored["other"][0] and rec["manifest"]["name"] == "other"
    assert "latencies_us" not in rec and rec["num_latencies"] == len(bench_record.latencies_us)
    assert rec["settings"]["scenario"] == "single-stream"
    assert rec["latency"]["percentiles"]["p90"]["value"] == pytest.approx(bench_record.latency.percentiles["p90"].value)
    assert rec["throughput_samples_per_second"] == pytest.approx(bench_record.throughput_samples_per_second)
    assert rec["hardware"] and rec["software"] and rec["pipeline"]


def test_the_benchmarks_api_refuses_hostile_requests(
    client: TestClient, stored: dict[str, list[str]], headers_for: Callable[[str], dict[str, str]]
) -> None:
    bench_id = stored["lite0"][0]
    for url in ("/api/v1/benchmarks", f"/api/v1/benchmarks/{bench_id}"):
        r = client.get(url)
        assert r.status_code == 401, url
        assert r.json()["error"]["field"] == "header.authorization"
        bad = client.get(url, headers={"Authorization": "Bearer rs_not-a-token"})
        assert bad.status_code == 401, url
    admin = headers_for("admin")
    created = client.post("/api/v1/tokens", json={"name": "gone", "role": "viewer"}, headers=admin).json()
    gone = {"Authorization": f"Bearer {created['token']}"}
    assert client.get("/api/v1/benchmarks", headers=gone).status_code == 200
    token_id = next(t["id"] for t in client.get("/api/v1/tokens", headers=admin).json() if t["name"] == "gone")
    assert client.post(f"/api/v1/tokens/{token_id}/revoke", headers=admin).status_code == 200
    for url in ("/api/v1/benchmarks", f"/api/v1/benchmarks/{bench_id}"):  # a revoked token reads nothing
        revoked = client.get(url, headers=gone)
        assert revoked.status_code == 401 and revoked.json()["error"]["message"] == "unknown or revoked token"
    for role in ("viewer", "runner", "admin"):  # reading needs the role viewer; every role has it
        assert client.get(f"/api/v1/benchmarks/{bench_id}", headers=headers_for(role)).status_code == 200
    viewer = headers_for("viewer")
    huge = client.get("/api/v1/benchmarks", params={"page_size": 10**9}, headers=viewer)
    assert huge.status_code == 422 and huge.json()["error"]["field"] == "query.page_size"
    far = client.get("/api/v1/benchmarks", params={"page": 2**62}, headers=viewer)
    assert far.status_code == 422 and far.json()["error"]["field"] == "query.page"
    typo = client.get("/api/v1/benchmarks", params={"manfest": "lite0"}, headers=viewer)
    assert typo.status_code == 422
    assert typo.json()["error"] == {
        "message": "unknown query parameter 'manfest' (allowed: manifest, page, page_size)",
        "field": "query.manfest",
        "code": "invalid",
    }
    long = client.get("/api/v1/benchmarks", params={"manifest": "x" * 301}, headers=viewer)
    assert long.status_code == 422 and long.json()["error"]["field"] == "query.manifest"
    unknown = client.get("/api/v1/benchmarks/ffffffffffff", headers=viewer)
    assert unknown.status_code == 404 and unknown.json()["error"]["field"] == "benchmark_id"
    assert "ffffffffffff" in unknown.json()["error"]["message"]
    too_long = client.get(f"/api/v1/benchmarks/{'a' * 101}", headers=viewer)
    assert too_long.status_code == 422


# --- the benchmarks pages -------------------------------------------------------------------------------------


def test_the_benchmarks_page_lists_filters_and_opens_one(
    service_app: Any, tokens: dict[str, str], stored: dict[str, list[str]], bench_record: Any
) -> None:
    client = logged_in(service_app, tokens["viewer"])
    runs = client.get("/runs").text
    assert '<a href="/benchmarks">Benchmarks</a>' in runs  # the nav link
    page = client.get("/benchmarks")
    assert page.status_code == 200
    assert a11y(page.text).text_of("benchmarks-total") == "5 benchmarks; page 1 of 1."
    assert page.text.count('class="benchmark-link"') == 5
    assert_accessible(page.text)
    lite0 = client.get("/benchmarks", params={"manifest": "lite0", "page_size": "25"}).text
    assert lite0.count('class="benchmark-link"') == 3 and '<option value="lite0" selected>' in lite0
    assert all(f'href="/benchmarks/{i}"' in lite0 for i in stored["lite0"])
    assert not any(i in lite0 for i in stored["other"])
    store = service_app.state.store
    from tests.store.records import TOP1_A, make_record

    store.save(make_record("cd" * 16, TOP1_A))  # a stored run of efficientnet-lite0: its model page
    model = client.get("/models/efficientnet-lite0").text
    assert '<a id="model-benchmarks" href="/benchmarks?manifest=efficientnet-lite0">' in model
    one = client.get(f"/benchmarks/{stored['lite0'][0]}")
    assert one.status_code == 200
    assert stored["lite0"][0] in one.text and "single-stream" in one.text
    p90 = bench_record.latency.percentiles["p90"].value
    assert f"p90 {p90:.3f}" in one.text and f"{bench_record.throughput_samples_per_second:.1f} samples/s" in one.text
    assert "<h2>Provenance</h2>" in one.text and bench_record.manifest.sha256 in one.text
    assert_accessible(one.text)
    for params, field in (({"page_size": "1000000"}, "page_size"), ({"page": "0"}, "page")):
        bad = client.get("/benchmarks", params=params)
        assert bad.status_code == 422 and field in bad.text
    assert client.get("/benchmarks/ffffffffffff").status_code == 404
    anonymous = TestClient(service_app)
    r = anonymous.get("/benchmarks", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login")
