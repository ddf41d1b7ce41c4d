"""``repliscope serve --scheduler``: the service on a real ``dask scheduler`` with a ``repliscope agent`` process.
The agent is listed alive with its pid; a job runs on it (its log names it); SIGKILLed, the agent is listed gone
(last seen) on the API and the agents page, and a job is then refused at once with "no live agent"."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

pytest.importorskip("distributed", reason="the 'agents' extra (dask distributed) is not installed")

from tests.agents.procs import Processes
from tests.service.test_api_jobs import _upload_lite0, wait_for

AGENT = "svc-agent-a"


@pytest.fixture
def tcp_service(tmp_path: Path) -> Iterator[tuple[Any, Processes, dict[str, str]]]:
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.accounts import create_token

    procs = Processes(tmp_path)
    try:
        address = procs.scheduler()
        procs.agent(AGENT, address)
        app = create_app(ServiceConfig(db_url=f"sqlite:///{tmp_path / 'svc.db'}", scheduler=address))
        try:
            try:
                app.state.cluster.get().wait_for_agents(1, timeout=90)
            except Exception as exc:
                raise RuntimeError(f"{exc}\n{procs.log(AGENT)}") from exc
            first_start(app.state.store)
            tokens = {role: create_token(app.state.store, f"tcp-{role}", role) for role in ("viewer", "runner")}
            yield app, procs, tokens
        finally:
            app.state.executor.shutdown(wait=True)
            app.state.cluster.close()
    finally:
        procs.stop_all()


def test_the_service_on_a_tcp_scheduler_lists_runs_and_sees_an_agent_go(
    tcp_service: tuple[Any, Processes, dict[str, str]],
) -> None:
    app, procs, tokens = tcp_service
    viewer = {"Authorization": f"Bearer {tokens['viewer']}"}
    runner = {"Authorization": f"Bearer {tokens['runner']}"}
    client = TestClient(app)
    [agent] = client.get("/api/v1/agents", headers=viewer).json()
    assert (agent["capabilities"]["agent_id"], agent["alive"]) == (AGENT, True)
    assert agent["capabilities"]["pid"] == procs.procs[AGENT].pid

    ref = _upload_lite0(client, runner)
    body = {
        "kind": "evaluate",
        "manifest": ref,
        "runtime": "onnxruntime",
        "dataset": "foolbox_imagenet",
        "options": {"limit": 2},
    }
    r = client.post("/api/v1/jobs", json=body, headers=runner)
    assert r.status_code == 202, r.text
    job = wait_for(client, r.json()["id"], runner, timeout=300)
    log = client.get(f"/api/v1/jobs/{job['id']}/log", headers=runner).text
    assert job["status"] == "succeeded", log + procs.log(AGENT)
    assert f"running on agent {AGENT}" in log and f"ran on agent {AGENT}" in log
    assert (job["progress_done"], job["progress_total"]) == (2, 2)
    [run_id] = job["result_ids"]
    assert app.state.store.get(run_id).counts["evaluated"] == 2

    procs.kill(AGENT)
    deadline = time.monotonic() + 60
    while True:
        [agent] = client.get("/api/v1/agents", headers=viewer).json()
        if not agent["alive"]:
            break
        assert time.monotonic() < deadline, "the killed agent is still listed alive after 60 s"
        time.sleep(0.5)
    assert agent["last_seen"] is not None and agent["executing"] == 0
    page = client.get("/agents", headers=viewer).text
    assert '<span class="badge gone">gone</span>' in page and f"<code>{AGENT}</code>" in page
    refused = client.post("/api/v1/jobs", json=body, headers=runner)
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "no_agent_matches"
    assert "no live agent" in refused.json()["error"]["message"] and refused.json()["error"]["reasons"] == {}
