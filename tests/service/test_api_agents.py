"""The service on agents: ``/api/v1/agents`` lists the embedded LocalCluster's agent with this venv's exact
versions; jobs run as Dask tasks through ``DaskJobExecutor`` and store their results exactly once per idempotency
key; a job no agent qualifies for is refused (422, every agent's reasons) and leaves no job row; stored stack
matrices are served (API, their page, the agents page's list)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.matrices import MATRIX_ID
from tests.service.test_api_jobs import _upload_lite0, wait_for

pytest.importorskip("distributed", reason="the 'agents' extra (dask distributed) is not installed")

AGENT_ID = f"{socket.gethostname()}-{os.getpid()}"


def test_the_new_endpoints_need_a_token_and_submitting_needs_a_runner(
    client: TestClient, headers_for: Callable[[str], dict[str, str]]
) -> None:
    for path in ("/api/v1/agents", "/api/v1/stack-matrices", f"/api/v1/stack-matrices/{MATRIX_ID}"):
        r = client.get(path)
        assert r.status_code == 401, path
        assert r.json()["error"]["code"] == "unauthenticated"
        r = client.get(path, headers={"Authorization": "Bearer rs_not-a-token"})
        assert r.status_code == 401, path
    for path in ("/agents", f"/stack-matrices/{MATRIX_ID}"):
        r = client.get(path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next=%2F"), path
    r = client.post(
        "/api/v1/jobs",
        json={
            "kind": "evaluate",
            "manifest": "efficientnet-lite0@1.0.0",
            "runtime": "onnxruntime",
            "dataset": "foolbox_imagenet",
            "options": {"hardware": ["agent_id=nope"]},
        },
        headers=headers_for("viewer"),
    )
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    assert client.get("/api/v1/stack-matrices", headers=headers_for("viewer")).json() == []
    missing = client.get(f"/api/v1/stack-matrices/{MATRIX_ID}", headers=headers_for("viewer"))
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert MATRIX_ID in missing.json()["error"]["message"]


def test_the_embedded_agent_is_listed_with_this_venvs_versions(
    client: TestClient, headers_for: Callable[[str], dict[str, str]]
) -> None:
    from repliscope.evaluation.provenance import usable_cores

    r = client.get("/api/v1/agents", headers=headers_for("viewer"))
    assert r.status_code == 200, r.text
    [agent] = r.json()
    caps = agent["capabilities"]
    assert agent["alive"] is True and agent["executing"] == 0
    assert agent["address"].startswith("tls://127.0.0.1:")
    assert caps["agent_id"] == AGENT_ID and caps["hostname"] == socket.gethostname() and caps["pid"] == os.getpid()
    assert caps["runtimes"]["onnxruntime"]["onnxruntime"] == version("onnxruntime")
    assert caps["runtimes"]["torch"]["torch"] == version("torch")
    assert caps["distributions"]["onnxruntime"] == version("onnxruntime")
    assert caps["repliscope_version"] == version("repliscope")
    assert caps["cores"] == usable_cores() and caps["memory_gib"] > 0
    assert caps["stack"]["key"] == "current"

    page = client.get("/agents", headers=headers_for("viewer"))
    assert page.status_code == 200
    assert f"<code>{AGENT_ID}</code>" in page.text
    assert '<span class="badge alive">alive</span>' in page.text
    assert f"onnxruntime: onnxruntime {version('onnxruntime')}" in page.text
    assert '<a href="/agents">Agents</a>' in page.text
    # at 390 px the runtimes list keeps a readable width (the table scrolls in its box, not one word a line)
    assert '<td class="list"><ul class="cells"><li>' in page.text
    assert "td.list { min-width: 15rem; }" in client.get("/static/style.css").text


def test_a_job_no_agent_qualifies_for_is_refused_with_the_reasons(
    client: TestClient, headers_for: Callable[[str], dict[str, str]]
) -> None:
    runner = headers_for("runner")
    ref = _upload_lite0(client, runner)
    body = {"kind": "evaluate", "manifest": ref, "runtime": "onnxruntime", "dataset": "foolbox_imagenet"}
    r = client.post("/api/v1/jobs", json={**body, "options": {"hardware": ["agent_id=nope"]}}, headers=runner)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "no_agent_matches" and error["field"] == "body.options"
    assert list(error["reasons"]) == [AGENT_ID]
    assert any("agent_id" in reason and "nope" in reason for reason in error["reasons"][AGENT_ID])
    assert AGENT_ID in error["message"]

    r = client.post("/api/v1/jobs", json={**body, "options": {"requires": ["onnxruntime<1.0"]}}, headers=runner)
    assert r.status_code == 422 and r.json()["error"]["code"] == "no_agent_matches"
    assert version("onnxruntime") in str(r.json()["error"]["reasons"][AGENT_ID])

    r = client.post("/api/v1/jobs", json={**body, "options": {"stack": "0123456789ab"}}, headers=runner)
    assert r.status_code == 422 and r.json()["error"]["reasons"] == {
        AGENT_ID: ["runs stack 'current', not '0123456789ab'"]
    }

    r = client.post("/api/v1/jobs", json={**body, "options": {"hardware": ["gpu_count>=1"]}}, headers=runner)
    assert r.status_code == 422 and r.json()["error"]["field"] == "body.options.hardware"
    assert "cpu_model" in r.json()["error"]["message"] and "memory_gib" in r.json()["error"]["message"]
    assert client.get("/api/v1/jobs", headers=runner).json() == []  # a refused job leaves no row


def test_a_job_runs_on_the_agent_and_stores_once_per_idempotency_key(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], service_app: Any
) -> None:
    runner = headers_for("runner")
    store = service_app.state.store
    ref = _upload_lite0(client, runner)
    body = {
        "kind": "evaluate",
        "manifest": ref,
        "runtime": "onnxruntime",
        "dataset": "foolbox_imagenet",
        "options": {"limit": 4, "idempotency_key": "lite0-four", "hardware": [f"agent_id={AGENT_ID}"]},
    }
    first = client.post("/api/v1/jobs", json=body, headers=runner)
    assert first.status_code == 202, first.text
    job = wait_for(client, first.json()["id"], runner)
    log = client.get(f"/api/v1/jobs/{job['id']}/log", headers=runner).text
    assert job["status"] == "succeeded", log
    assert (job["progress_done"], job["progress_total"]) == (4, 4)
    assert f"ran on agent {AGENT_ID}" in log
    [run_id] = job["result_ids"]
    assert store.count_job_results() == 1 and store.get_job_result("lite0-four").run_ids == [run_id]
    assert [s.run_id for s in store.list(limit=10)] == [run_id]
    assert store.get(run_id).software["stack"]["key"] == "current"

    again = wait_for(client, client.post("/api/v1/jobs", json=body, headers=runner).json()["id"], runner)
    assert again["status"] == "succeeded" and again["result_ids"] == [run_id]
    assert "stored already" in client.get(f"/api/v1/jobs/{again['id']}/log", headers=runner).text
    assert store.count_job_results() == 1 and [s.run_id for s in store.list(limit=10)] == [run_id]


def test_a_stored_stack_matrix_is_served_and_rendered(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], service_app: Any
) -> None:
    from tests.service.matrices import FLIPPED, OLD_KEY, make_matrix
    from tests.service.test_web_pages import assert_accessible
    from tests.store.records import TOP1_A, make_record

    store = service_app.state.store
    store.save_stack_matrix(make_matrix())
    store.save(make_record("a1" * 16, TOP1_A))  # the model page lists the matrices of a model with a run
    viewer = headers_for("viewer")
    [listed] = client.get("/api/v1/stack-matrices", headers=viewer).json()
    assert listed == {
        "matrix_id": MATRIX_ID,
        "created_at": "2026-11-23T18:00:05Z",
        "manifest": "efficientnet-lite0@1.0.0",
        "runtime": "onnxruntime",
        "dataset_identity": "foolbox-identity-0001",
        "samples": 20,
        "stacks": ["current", "onnxruntime==1.20.1"],
        "failed_stacks": [],
        "min_agreement": 0.95,
        "all_hashes_equal": False,
    }
    assert client.get("/api/v1/stack-matrices", params={"model": "other"}, headers=viewer).json() == []
    got = client.get(f"/api/v1/stack-matrices/{MATRIX_ID[:8]}", headers=viewer).json()
    assert got["matrix_id"] == MATRIX_ID and [s["key"] for s in got["stacks"]] == ["current", OLD_KEY]
    assert got["pairs"][0]["flips_ab"] == [FLIPPED] and got["pairs"][0]["max_abs_output_diff"] == 0.0123

    page = client.get(f"/stack-matrices/{MATRIX_ID}", headers=viewer)
    assert page.status_code == 200
    text = page.text
    assert "<h1>Stack matrix 5ac0abababab</h1>" in text
    assert '<td class="num">90.00 %</td>' in text and '<td class="num">85.00 %</td>' in text  # top-1 per stack
    assert "onnxruntime 1.20.1" in text and "onnxruntime 1.23.2" in text
    assert f'<a href="/runs/{"b2" * 16}">' in text
    row = text[text.index('<tr class="differs"><th scope="row">current</th><td>onnxruntime==1.20.1</td>') :]
    row = row[: row.index("</tr>")]
    assert (
        '<td class="num">95.00 %</td><td class="num">1</td>\n<td class="num">0</td><td class="num">0.0123</td>'
        '<td class="num">0.000456</td>'
    ) in row and "<td>differs</td>" in row
    assert f"<code>{FLIPPED}</code>" in text
    assert_accessible(text)
    assert client.get("/stack-matrices/ffffffffffff", headers=viewer).status_code == 404

    agents = client.get("/agents", headers=viewer).text
    assert_accessible(agents)
    assert f'<a href="/stack-matrices/{MATRIX_ID}"><code>5ac0abababab</code></a>' in agents
    assert "current · onnxruntime==1.20.1" in agents
    assert '<td class="num">95.00 %</td>' in agents  # the lowest agreement of a pair, in the house's format
    model = client.get("/models/efficientnet-lite0", headers=viewer).text
    assert f'<a href="/stack-matrices/{MATRIX_ID}">' in model


def test_a_stack_that_could_not_run_shows_its_error(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], service_app: Any
) -> None:
    from repliscope.stacks.matrix import StackEntry
    from tests.service.matrices import make_matrix

    matrix = make_matrix("5ac1" + "cd" * 14)
    why = "onnxruntime 1.16.3 cannot load the model: Unsupported model IR version: 10, max supported IR version: 9"
    matrix.stacks.append(
        StackEntry(
            key="fedcba987654",
            spec="onnxruntime==1.16.3",
            agent_id="host-3",
            versions={"onnxruntime": "1.16.3"},
            error=why,
        )
    )
    service_app.state.store.save_stack_matrix(matrix)
    viewer = headers_for("viewer")
    [listed] = client.get("/api/v1/stack-matrices", headers=viewer).json()
    assert listed["failed_stacks"] == ["onnxruntime==1.16.3"] and listed["min_agreement"] == 0.95
    page = client.get(f"/stack-matrices/{matrix.matrix_id}", headers=viewer).text
    assert f'<td colspan="6" class="prose error">could not run: {why}</td>' in page
    assert page.count('<tr class="significant">') == 1
    assert "current · onnxruntime==1.20.1 · onnxruntime==1.16.3 (failed)" in client.get("/agents", headers=viewer).text


def test_a_job_that_fails_on_every_agent_is_failed_with_each_agents_reason(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], service_app: Any
) -> None:
    """The dataset is gone where the job runs (here: a spec that no longer resolves): the agent's error, then
    JobFailedEverywhere naming the agent; nothing stored."""
    from repliscope.service.executor import JobSpec
    from repliscope.store.service_tables import create_job

    runner = headers_for("runner")
    ref = _upload_lite0(client, runner)
    store = service_app.state.store
    manifest = client.get(f"/api/v1/manifests/{ref}", headers=runner).json()
    job = create_job(store, "evaluate", ref, "onnxruntime", "gone", {}, created_by="test")
    service_app.state.executor.submit(
        JobSpec(job.id, "evaluate", ref, manifest["text"], "onnxruntime", "gone", "/nonexistent/repliscope-dataset")
    )
    done = wait_for(client, job.id, runner)
    assert done["status"] == "failed" and done["result_ids"] == []
    assert done["error"].startswith(f"job {job.id} failed on every agent it could run on (1): {AGENT_ID}: ")
    assert "/nonexistent/repliscope-dataset" in done["error"]
    log = client.get(f"/api/v1/jobs/{job.id}/log", headers=runner).text
    assert f"agent {AGENT_ID}: " in log and log.rstrip().splitlines()[-1].startswith("error: job ")
    assert store.count_job_results() == 0


def test_a_job_running_when_the_server_stops_is_failed_as_interrupted(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], service_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The executor's shutdown stops the job on its agent (the cancel Event) and marks it failed, interrupted —
    as ``repliscope serve`` marks the jobs a previous server left — not cancelled by a user; nothing stored."""
    import threading

    import repliscope.job_execution
    from repliscope.service.executor import INTERRUPTED

    started, gate = threading.Event(), threading.Event()
    real = repliscope.job_execution.execute_job

    def held(job: Any, cache_dir: Any, on_progress: Any, log: Any, on_total: Any = None) -> Any:
        def progress(n: int) -> None:  # on the agent's worker thread: hold the job until the stop is on its way
            started.set()
            gate.wait(30)
            on_progress(n)

        return real(job, cache_dir, progress, log, on_total)

    monkeypatch.setattr(repliscope.job_execution, "execute_job", held)
    runner = headers_for("runner")
    ref = _upload_lite0(client, runner)
    r = client.post(
        "/api/v1/jobs",
        json={
            "kind": "evaluate",
            "manifest": ref,
            "runtime": "onnxruntime",
            "dataset": "foolbox_imagenet",
            "options": {"limit": 2},
        },
        headers=runner,
    )
    assert started.wait(120), "the job never reached its first progress step"
    threading.Timer(1.0, gate.set).start()
    service_app.state.executor.shutdown(wait=True)
    job = client.get(f"/api/v1/jobs/{r.json()['id']}", headers=runner).json()
    assert (job["status"], job["error"], job["result_ids"]) == ("failed", INTERRUPTED, [])
    assert service_app.state.store.count_job_results() == 0


def test_the_wizard_offers_the_live_agents_and_places_the_job_on_the_chosen_one(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], service_app: Any, tokens: dict[str, str]
) -> None:
    from tests.service.test_web_pages import assert_accessible, logged_in

    runner = headers_for("runner")
    ref = _upload_lite0(client, runner)
    web = logged_in(service_app, tokens["runner"])
    page = web.get("/new")
    assert page.status_code == 200
    assert f'<option value="{AGENT_ID}">{AGENT_ID} — {socket.gethostname()}, ' in page.text
    assert_accessible(page.text)
    form = {"manifest": ref, "runtime": "onnxruntime", "dataset": "foolbox_imagenet", "kind": "evaluate", "limit": "2"}
    refused = web.post("/new", data={**form, "agent": "nope"})
    assert refused.status_code == 422
    assert "options: no live agent meets the job&#39;s constraints" in refused.text and AGENT_ID in refused.text
    assert client.get("/api/v1/jobs", headers=runner).json() == []
    r = web.post("/new", data={**form, "agent": AGENT_ID}, follow_redirects=False)
    assert r.status_code == 303
    job = wait_for(client, r.headers["location"].removeprefix("/jobs/"), runner)
    assert job["status"] == "succeeded" and job["options"]["hardware"] == [f"agent_id={AGENT_ID}"]
    assert f"ran on agent {AGENT_ID}" in client.get(f"/api/v1/jobs/{job['id']}/log", headers=runner).text


def test_without_the_agents_extra_jobs_run_in_process_and_the_agents_are_a_503(
    service_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``distributed``: the app takes the in-process ThreadJobExecutor, ``serve`` says so (and refuses
    ``--scheduler`` naming the extra), ``/api/v1/agents`` is a 503 naming the extra."""
    import repliscope.service.cluster
    from repliscope.errors import RepliscopeError
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.executor import ThreadJobExecutor
    from repliscope.service.startup import connect_agents, first_start

    monkeypatch.setattr(repliscope.service.cluster, "dask_available", lambda: False)
    app = create_app(ServiceConfig(db_url=service_db_url))
    try:
        assert isinstance(app.state.executor, ThreadJobExecutor)
        assert connect_agents(app, None) == (
            "agents: none — the 'agents' extra is not installed, jobs run in this process"
        )
        with pytest.raises(RepliscopeError, match=r"--scheduler: agents need the 'agents' extra"):
            connect_agents(app, "tcp://127.0.0.1:8786")
        admin, _ = first_start(app.state.store)
        r = TestClient(app).get("/api/v1/agents", headers={"Authorization": f"Bearer {admin}"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"
        assert "pip install 'repliscope[agents]'" in r.json()["error"]["message"]
    finally:
        app.state.executor.shutdown(wait=True)
        app.state.cluster.close()
