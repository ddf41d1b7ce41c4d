"""``/api/v1/jobs``: an evaluation of the embedded default (EfficientNet-Lite0 on foolbox_imagenet, onnxruntime)
submitted through the API runs in the in-process executor with the CLI's core functions; the run it stores is
served with its samples, comparison and HTML report. Bad submissions are 4xx naming the field."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import LITE0, LITE0_FOOLBOX_TOP1

JOB_TIMEOUT_S = 600.0


def _upload_lite0(client: TestClient, headers: dict[str, str]) -> str:
    r = client.post("/api/v1/manifests", content=LITE0.read_bytes(), headers={**headers, "Content-Type": "text/yaml"})
    assert r.status_code in (200, 201), r.text
    ref: str = r.json()["ref"]
    return ref


def wait_for(client: TestClient, job_id: str, headers: dict[str, str], timeout: float = JOB_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish in {timeout} s: {job}")


def test_evaluate_job_runs_and_its_run_is_served(
    client: TestClient, headers_for: Callable[[str], dict[str, str]]
) -> None:
    runner, viewer = headers_for("runner"), headers_for("viewer")
    ref = _upload_lite0(client, runner)
    r = client.post(
        "/api/v1/jobs",
        json={"kind": "evaluate", "manifest": ref, "runtime": "onnxruntime", "dataset": "foolbox_imagenet"},
        headers=runner,
    )
    assert r.status_code == 202, r.text
    assert r.json()["status"] == "queued" and r.json()["created_by"] == "test-runner"
    job = wait_for(client, r.json()["id"], viewer)
    log = client.get(f"/api/v1/jobs/{job['id']}/log", headers=viewer).text
    assert job["status"] == "succeeded", log
    assert (job["progress_done"], job["progress_total"]) == (20, 20)
    assert job["started_at"] is not None and job["finished_at"] is not None
    assert log.startswith(f"evaluate {ref} on onnxruntime, dataset foolbox_imagenet")
    [run_id] = job["result_ids"]

    run = client.get(f"/api/v1/runs/{run_id}", headers=viewer).json()
    assert "samples" not in run and run["num_samples"] == 20
    assert run["manifest"]["name"] == "efficientnet-lite0" and run["runtime"]["runtime"] == "onnxruntime"
    assert run["counts"]["evaluated"] == 20
    top1 = next(m for m in run["metrics"] if m["name"] == "top1")
    assert (top1["value"], top1["successes"], top1["n"]) == (18 / 20, 18, 20)  # a fraction, never percent
    assert run["claims"][0]["verdict"] == "not comparable"  # foolbox's 20 images are not ImageNet val

    page = client.get(f"/api/v1/runs/{run_id}/samples", params={"page": 2, "page_size": 8}, headers=viewer).json()
    assert (page["total"], page["page"], len(page["items"])) == (20, 2, 8)
    assert [s["topk_indices"][0] for s in page["items"]] == LITE0_FOOLBOX_TOP1[8:16]
    empty = client.get(f"/api/v1/runs/{run_id}/samples", params={"page": 4, "page_size": 8}, headers=viewer).json()
    assert empty["items"] == [] and empty["total"] == 20

    report = client.get(f"/api/v1/runs/{run_id}/report", headers=viewer)
    assert report.status_code == 200 and report.headers["content-type"].startswith("text/html")
    assert "efficientnet-lite0" in report.text and "not comparable" in report.text

    same = client.get("/api/v1/runs/compare", params={"a": run_id, "b": run_id[:8]}, headers=viewer).json()
    assert same["common_evaluated"] == 20 and same["top1_flips"] == [] and same["same_result_hash"] is True

    listed = client.get(
        "/api/v1/runs", params={"model": "efficientnet-lite0", "runtime": "onnxruntime"}, headers=viewer
    ).json()
    assert listed["total"] == 1 and listed["items"][0]["run_id"] == run_id
    models = client.get("/api/v1/models", headers=viewer).json()
    [lite0] = [m for m in models if m["name"] == "efficientnet-lite0"]
    assert lite0["versions"] == ["1.0.0"] and lite0["claims"][0]["value"] == 75.1
    assert [(x["runtime"], x["run_id"], x["verdict"]) for x in lite0["latest"]] == [
        ("onnxruntime", run_id, "not comparable")
    ]
    assert client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=runner).status_code == 409


def test_bad_submissions_are_4xx_naming_the_field(
    client: TestClient, headers_for: Callable[[str], dict[str, str]]
) -> None:
    runner = headers_for("runner")
    ref = _upload_lite0(client, runner)
    good = {"kind": "evaluate", "manifest": ref, "runtime": "onnxruntime", "dataset": "foolbox_imagenet"}

    def submit(**change: Any) -> Any:
        r = client.post("/api/v1/jobs", json={**good, **change}, headers=runner)
        assert 400 <= r.status_code < 500, r.text
        return r.status_code, r.json()["error"]["field"]

    assert submit(dataset="imagenet_val") == (422, "body.dataset")
    assert submit(dataset="/etc") == (422, "body.dataset")
    assert submit(runtime="tensorrt") == (422, "body.runtime")
    assert submit(manifest="efficientnet-lite0@2.0.0") == (422, "body.manifest")
    assert submit(manifest="no-version") == (422, "body.manifest")
    assert submit(kind="train") == (422, "body.kind")
    assert submit(options={"limit": 0}) == (422, "body.options.limit")
    assert submit(options={"path": "/data"}) == (422, "body.options.path")
    assert submit(kind="diff") == (422, "body.options.runtime_b")
    assert submit(kind="diff", options={"runtime_b": "nope"}) == (422, "body.options.runtime_b")
    r = client.post("/api/v1/jobs", content=b"{not json", headers={**runner, "Content-Type": "application/json"})
    assert r.status_code == 422
    assert client.get("/api/v1/jobs/" + "f" * 32, headers=runner).status_code == 404
    assert client.post("/api/v1/jobs/" + "f" * 32 + "/cancel", headers=runner).status_code == 404
    assert client.get("/api/v1/jobs", headers=runner).json() == []


def test_cancel_a_queued_job(
    service_db_url: str, headers_for: Callable[[str], dict[str, str]], service_app: Any
) -> None:
    """A job whose thread has not handed it to an agent yet is cancelled at once and never runs."""
    import threading

    executor = service_app.state.executor
    gate = threading.Event()
    real_follow = executor._follow
    executor._follow = lambda job, cancel: (gate.wait(30), real_follow(job, cancel))
    with TestClient(service_app) as client:
        runner = headers_for("runner")
        ref = _upload_lite0(client, runner)
        body = {
            "kind": "evaluate",
            "manifest": ref,
            "runtime": "onnxruntime",
            "dataset": "foolbox_imagenet",
            "options": {"limit": 2},
        }
        first = client.post("/api/v1/jobs", json=body, headers=runner).json()
        second = client.post("/api/v1/jobs", json=body, headers=runner).json()
        cancelled = client.post(f"/api/v1/jobs/{second['id']}/cancel", headers=runner)
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        gate.set()
        done = wait_for(client, first["id"], runner)
        assert done["status"] == "succeeded" and done["progress_done"] == 2
        second_log = client.get(f"/api/v1/jobs/{second['id']}/log", headers=runner).text
        assert client.get(f"/api/v1/jobs/{second['id']}", headers=runner).json()["status"] == "cancelled"
        assert second_log == "cancel requested by test-runner\ncancelled before an agent started it\n"
        statuses = [j["status"] for j in client.get("/api/v1/jobs", headers=runner).json()]
        assert statuses == ["cancelled", "succeeded"]
        assert service_app.state.store.count_job_results() == 1


def test_pitfalls_bench_and_diff_jobs(client: TestClient, headers_for: Callable[[str], dict[str, str]]) -> None:
    runner = headers_for("runner")
    ref = _upload_lite0(client, runner)
    base = {"manifest": ref, "runtime": "onnxruntime", "dataset": "foolbox_imagenet"}
    r = client.post(
        "/api/v1/jobs",
        json={**base, "kind": "pitfalls", "options": {"variants": ["no_center_crop"], "limit": 3, "visual": 0}},
        headers=runner,
    )
    assert r.status_code == 202, r.text
    pitfalls = wait_for(client, r.json()["id"], runner)
    assert pitfalls["status"] == "succeeded", client.get(f"/api/v1/jobs/{pitfalls['id']}/log", headers=runner).text
    assert len(pitfalls["result_ids"]) == 3  # the reference run, the variant's run, the sweep
    runs = client.get("/api/v1/runs", params={"sweep_id": pitfalls["result_ids"][-1]}, headers=runner).json()
    assert runs["total"] == 2 and "no_center_crop" in {r["variant"] for r in runs["items"]}
    assert {r["num_samples"] for r in runs["items"]} == {3}
    timings = {
        r["variant"]: client.get(f"/api/v1/runs/{r['run_id']}", headers=runner).json()["timings"] for r in runs["items"]
    }  # issue 21 item 2: each variant's own timings, not one shared loop
    for t in timings.values():
        assert t["loop_seconds"] == t["inference_seconds"] == pytest.approx(sum(t["batch_latencies_seconds"]))
        assert t["throughput_samples_per_second"] == pytest.approx(3 / t["loop_seconds"])
    assert timings["reference"]["loop_seconds"] != timings["no_center_crop"]["loop_seconds"]

    r = client.post(
        "/api/v1/jobs",
        json={**base, "kind": "bench", "options": {"limit": 2, "min_duration_s": 0, "min_queries": 3}},
        headers=runner,
    )
    bench = wait_for(client, r.json()["id"], runner)
    assert bench["status"] == "succeeded", client.get(f"/api/v1/jobs/{bench['id']}/log", headers=runner).text
    assert len(bench["result_ids"]) == 1
    assert (bench["progress_done"], bench["progress_total"]) == (2, 2)  # not 0/2 after success (issue 21 item 2)
    bench_log = client.get(f"/api/v1/jobs/{bench['id']}/log", headers=runner).text
    assert "bench: onnxruntime with 1 thread(s), single-stream\n" in bench_log

    r = client.post(
        "/api/v1/jobs", json={**base, "kind": "diff", "options": {"limit": 2, "runtime_b": "torch"}}, headers=runner
    )
    diff = wait_for(client, r.json()["id"], runner)
    log = client.get(f"/api/v1/jobs/{diff['id']}/log", headers=runner).text
    assert diff["status"] == "succeeded", log
    [diff_id] = diff["result_ids"]  # the stored diff (issue 21 item 2)
    assert diff["progress_done"] == 2
    stored = client.get(f"/api/v1/diffs/{diff_id}", headers=runner).json()
    assert (stored["kind"], stored["a"], stored["b"], stored["samples"]) == ("task_diff", "onnxruntime", "torch", 2)
    assert '"a": "onnxruntime", "b": "torch"' in log and '"compared": 2' in log

    r = client.post(
        "/api/v1/jobs", json={**base, "kind": "pitfalls", "options": {"variants": ["nope"]}}, headers=runner
    )
    assert r.status_code == 422 and r.json()["error"]["field"] == "body.options.variants"


def test_cancel_a_running_job(service_app: Any, headers_for: Callable[[str], dict[str, str]]) -> None:
    """A running job cancelled stops at its agent's next progress step; nothing is stored (also when the agent
    finished before the cancel reached it)."""
    import threading

    executor = service_app.state.executor
    gate = threading.Event()
    real_callbacks = executor._progress_callbacks

    def gated(job_id: str) -> Any:
        on_total, callback, state = real_callbacks(job_id)

        def on_progress(n: int) -> None:
            callback(n)  # running now
            gate.wait(60)

        return on_total, on_progress, state

    executor._progress_callbacks = gated
    with TestClient(service_app) as client:
        runner = headers_for("runner")
        ref = _upload_lite0(client, runner)
        job = client.post(
            "/api/v1/jobs",
            json={
                "kind": "evaluate",
                "manifest": ref,
                "runtime": "onnxruntime",
                "dataset": "foolbox_imagenet",
                "options": {"limit": 4},
            },
            headers=runner,
        ).json()
        deadline = time.monotonic() + 60
        while client.get(f"/api/v1/jobs/{job['id']}", headers=runner).json()["status"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        r = client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=runner)
        assert r.status_code == 200 and r.json()["status"] == "running"  # stops at the next progress step
        gate.set()
        done = wait_for(client, job["id"], runner)
        assert done["status"] == "cancelled" and done["result_ids"] == [] and done["finished_at"] is not None
        assert client.get(f"/api/v1/jobs/{job['id']}/log", headers=runner).text.endswith("cancelled\n")
        assert client.get("/api/v1/runs", headers=runner).json()["total"] == 0
