"""Issue 38 item 2: no server path reaches a caller below admin. A run naming the model cache, a job's temporary
folder and the interpreter's environment, a job whose error and log name them, an agent advertising its stack's
virtual environment, a stack matrix whose failed stack names it: as a viewer token, every API route and page
that serves them shows each path relative to a named root (``<model cache>/...``, ``<python prefix>/...``) or as
``…/a/b`` (a temporary folder); an admin sees the values as stored."""

from __future__ import annotations

import csv
import io
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from repliscope.service.redaction import hide_paths, hide_paths_in, named_roots
from tests.store.records import TOP1_A, TOP1_B, make_record

RUN = "d0" * 16
OTHER = "d1" * 16
TMP = str(Path(tempfile.gettempdir()).resolve())
VENV = str(Path(sys.prefix).resolve())
JOB_DIR = f"{TMP}/repliscope-job-3f2a/work"
OUTSIDE = "/srv/shared/data/imagenet-sample"


@pytest.fixture
def cache_dir(service_app: Any) -> str:
    return dict(named_roots(service_app.state.config.cache_dir))["<model cache>"]


def _secrets(cache_dir: str) -> list[str]:
    """The absolute server paths no viewer may read."""
    return [cache_dir, TMP + "/", VENV + "/", OUTSIDE]


def _assert_hidden(text: str, cache_dir: str) -> None:
    for secret in _secrets(cache_dir):
        assert secret not in text, (secret, text[:2000])


@pytest.fixture
def leaky_runs(service_app: Any, cache_dir: str) -> None:
    store = service_app.state.store
    for run_id, top1 in ((RUN, TOP1_A), (OTHER, TOP1_B)):
        rec = make_record(run_id, top1)
        rec.manifest.path = f"{JOB_DIR}/manifest.yaml"
        rec.runtime["model_path"] = f"{cache_dir}/onnx/efficientnet-lite0-1.0.0.onnx"
        rec.runtime["export"] = {"note": f"exported to {cache_dir}/onnx/x.onnx with {VENV}/bin/python3"}
        rec.dataset["origin"] = OUTSIDE
        rec.software["executable"] = f"{VENV}/bin/python3"
        rec.samples[3].error = f"cannot decode {OUTSIDE}/n01440764/x.JPEG (job folder {JOB_DIR})"
        rec.samples[3].topk_indices, rec.samples[3].topk_probs = [], []
        store.save(rec)


VIEWER_RUN_ROUTES = [
    f"/api/v1/runs/{RUN}",
    f"/api/v1/runs/{RUN}/report",
    f"/api/v1/runs/{RUN}/samples",
    f"/api/v1/runs/{RUN}/samples/export?format=csv",
    f"/api/v1/runs/{RUN}/samples/export?format=json",
    f"/api/v1/runs/compare?a={RUN}&b={OTHER}",
    "/api/v1/runs",
    "/api/v1/runs/export?format=csv",
    "/api/v1/runs/export?format=json",
    f"/runs/{RUN}",
    f"/runs/{RUN}?show=all",
    f"/compare?run={RUN}&run={OTHER}",
]


@pytest.mark.parametrize("route", VIEWER_RUN_ROUTES)
def test_a_viewer_reads_no_server_path_of_a_run(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], leaky_runs: None, cache_dir: str, route: str
) -> None:
    r = client.get(route, headers=headers_for("viewer"))
    assert r.status_code == 200, r.text[:500]
    _assert_hidden(r.text, cache_dir)
    runner = client.get(route, headers=headers_for("runner"))
    _assert_hidden(runner.text, cache_dir)


def test_the_viewer_sees_the_paths_relative_to_named_roots_and_an_admin_as_stored(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], leaky_runs: None, cache_dir: str
) -> None:
    viewer = client.get(f"/api/v1/runs/{RUN}", headers=headers_for("viewer")).json()
    assert viewer["runtime"]["model_path"] == "<model cache>/onnx/efficientnet-lite0-1.0.0.onnx"
    assert viewer["manifest"]["path"] == "…/work/manifest.yaml"
    assert viewer["software"]["executable"] == "<python prefix>/bin/python3"
    assert viewer["dataset"]["origin"] == "…/data/imagenet-sample"
    assert viewer["runtime"]["export"]["note"] == (
        "exported to <model cache>/onnx/x.onnx with <python prefix>/bin/python3"
    )
    admin = client.get(f"/api/v1/runs/{RUN}", headers=headers_for("admin")).json()
    assert admin["runtime"]["model_path"] == f"{cache_dir}/onnx/efficientnet-lite0-1.0.0.onnx"
    assert admin["dataset"]["origin"] == OUTSIDE and admin["manifest"]["path"] == f"{JOB_DIR}/manifest.yaml"
    # the samples: the error of sample 3 in the page, the CSV and the JSON download
    page = client.get(f"/api/v1/runs/{RUN}/samples", headers=headers_for("viewer")).json()
    hidden = "cannot decode …/n01440764/x.JPEG (job folder …/repliscope-job-3f2a/work)"
    assert page["items"][3]["error"] == hidden
    table = list(
        csv.DictReader(
            io.StringIO(client.get(f"/api/v1/runs/{RUN}/samples/export?format=csv", headers=headers_for("viewer")).text)
        )
    )
    assert table[3]["error"] == hidden
    admin_page = client.get(f"/api/v1/runs/{RUN}/samples", headers=headers_for("admin")).json()
    assert admin_page["items"][3]["error"].startswith(f"cannot decode {OUTSIDE}/n01440764/x.JPEG")
    report = client.get(f"/api/v1/runs/{RUN}/report", headers=headers_for("admin")).text
    assert f"{cache_dir}/onnx/efficientnet-lite0-1.0.0.onnx" in report


@pytest.fixture
def failed_job(service_app: Any, cache_dir: str) -> str:
    from repliscope.store.service_tables import create_job, update_job

    store = service_app.state.store
    job = create_job(store, "evaluate", "efficientnet-lite0@1.0.0", "onnxruntime", "foolbox_imagenet", {})
    update_job(store, job.id, status="running")
    update_job(
        store,
        job.id,
        append_log=(
            "Traceback (most recent call last):\n"
            f'  File "{VENV}/lib/python3.11/site-packages/repliscope/job_execution.py", line 412, in execute_job\n'
            f"OSError: [Errno 28] No space left on device: '{cache_dir}/onnx/x.onnx.part' ({JOB_DIR})"
        ),
    )
    update_job(
        store,
        job.id,
        status="failed",
        error=f"internal error on agent host-1: OSError: No space left on device: '{JOB_DIR}/batch-0.npy'",
    )
    return str(job.id)


def test_a_viewer_reads_no_server_path_of_a_job(
    client: TestClient,
    headers_for: Callable[[str], dict[str, str]],
    service_app: Any,
    failed_job: str,
    cache_dir: str,
) -> None:
    viewer = headers_for("viewer")
    for route in (f"/api/v1/jobs/{failed_job}", f"/api/v1/jobs/{failed_job}/log", "/api/v1/jobs"):
        r = client.get(route, headers=viewer)
        assert r.status_code == 200, r.text
        _assert_hidden(r.text, cache_dir)
    job = client.get(f"/api/v1/jobs/{failed_job}", headers=viewer).json()
    assert job["error"] == ("internal error on agent host-1: OSError: No space left on device: '…/work/batch-0.npy'")
    log = client.get(f"/api/v1/jobs/{failed_job}/log", headers=viewer).text
    assert "<python prefix>/lib/python3.11/site-packages/repliscope/job_execution.py" in log
    assert "'<model cache>/onnx/x.onnx.part'" in log
    for page in (f"/jobs/{failed_job}", "/jobs"):
        html = client.get(page, headers=viewer)
        assert html.status_code == 200
        _assert_hidden(html.text, cache_dir)
    assert "…/work/batch-0.npy" in client.get(f"/jobs/{failed_job}", headers=viewer).text
    admin = headers_for("admin")
    assert JOB_DIR in client.get(f"/api/v1/jobs/{failed_job}", headers=admin).json()["error"]
    assert f"{VENV}/lib/python3.11" in client.get(f"/api/v1/jobs/{failed_job}/log", headers=admin).text
    assert JOB_DIR in client.get(f"/jobs/{failed_job}", headers=admin).text


def _agent(cache_dir: str) -> Any:
    from repliscope.agents.capabilities import AgentCapabilities
    from repliscope.agents.cluster import AgentInfo

    caps = AgentCapabilities(
        agent_id="host-1-4242",
        hostname="host-1",
        pid=4242,
        repliscope_version="0.1.0",
        python="3.11.7",
        runtimes={"onnxruntime": {"onnxruntime": "1.23.2"}},
        distributions={"onnxruntime": "1.23.2"},
        cpu_model="AMD EPYC",
        cpu_flags=["avx2"],
        cores=2,
        memory_gib=23.5,
        stack={
            "key": "a1b2c3d4e5f6",
            "spec": "onnxruntime==1.23.2",
            "python": f"{cache_dir}/stacks/a1b2c3d4e5f6/bin/python",
            "prefix": f"{VENV}/stacks/x",
            "work": f"{TMP}/repliscope-agent-1/work",
        },
        started_at=datetime(2026, 11, 28, 9, 0, tzinfo=UTC),
    )
    return AgentInfo(capabilities=caps, address="tls://127.0.0.1:40123", alive=True, last_seen=None, executing=0)


def test_a_viewer_reads_no_server_path_of_an_agent(
    client: TestClient,
    headers_for: Callable[[str], dict[str, str]],
    cache_dir: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from repliscope.service.routers import agents

    monkeypatch.setattr(agents, "list_agents", lambda _request: [_agent(cache_dir)])
    r = client.get("/api/v1/agents", headers=headers_for("viewer"))
    assert r.status_code == 200, r.text
    _assert_hidden(r.text, cache_dir)
    [agent] = r.json()
    stack = agent["capabilities"]["stack"]
    assert stack["python"] == "<model cache>/stacks/a1b2c3d4e5f6/bin/python"
    assert stack["work"] == "…/repliscope-agent-1/work" and agent["address"] == "tls://127.0.0.1:40123"
    assert client.get("/api/v1/agents", headers=headers_for("admin")).json()[0]["capabilities"]["stack"] == {
        **stack,
        "python": f"{cache_dir}/stacks/a1b2c3d4e5f6/bin/python",
        "prefix": f"{VENV}/stacks/x",
        "work": f"{TMP}/repliscope-agent-1/work",
    }
    page = client.get("/agents", headers=headers_for("viewer"))
    assert page.status_code == 200 and "host-1-4242" in page.text
    _assert_hidden(page.text, cache_dir)


def test_a_viewer_reads_no_server_path_of_a_stack_matrix(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], service_app: Any, cache_dir: str
) -> None:
    from repliscope.stacks.matrix import StackEntry
    from tests.service.matrices import make_matrix

    matrix = make_matrix("5ac2" + "ef" * 14)
    why = f"pip failed in {cache_dir}/stacks/fedcba987654: see {TMP}/pip-3f2a/log.txt"
    matrix.stacks.append(
        StackEntry(key="fedcba987654", spec="onnxruntime==1.16.3", agent_id="h", versions={}, error=why)
    )
    service_app.state.store.save_stack_matrix(matrix)
    viewer = headers_for("viewer")
    for route in (
        "/api/v1/stack-matrices",
        f"/api/v1/stack-matrices/{matrix.matrix_id}",
        f"/stack-matrices/{matrix.matrix_id}",
    ):
        r = client.get(route, headers=viewer)
        assert r.status_code == 200, r.text
        _assert_hidden(r.text, cache_dir)
    got = client.get(f"/api/v1/stack-matrices/{matrix.matrix_id}", headers=viewer).json()
    assert got["stacks"][-1]["error"] == "pip failed in <model cache>/stacks/fedcba987654: see …/pip-3f2a/log.txt"
    admin = client.get(f"/api/v1/stack-matrices/{matrix.matrix_id}", headers=headers_for("admin")).json()
    assert admin["stacks"][-1]["error"] == why


def test_hide_paths_keeps_urls_base64_and_markup() -> None:
    roots = [("<temp>", "/tmp")]
    assert hide_paths("see https://example.org/a/b and /tmp/x/y", roots) == "see https://example.org/a/b and <temp>/x/y"
    assert hide_paths("cmd|' /C calc'!A0", roots) == "cmd|' /C calc'!A0"  # one part: not a server path
    png = "data:image/png;base64,iVBORw0KGgo+/AAA/BBB+/9j/CCC=="
    assert hide_paths(png, roots) == png
    from markupsafe import Markup

    markup = Markup("<a href='/runs/x'>/tmp/y</a>")
    assert hide_paths_in(markup, roots) is markup
    assert hide_paths_in({"segmentation": {"predicted": {"3": "/tmp/z"}}, "e": "/tmp/z"}, roots) == {
        "segmentation": {"predicted": {"3": "/tmp/z"}},
        "e": "<temp>/z",
    }
    assert hide_paths_in({"e": "/tmp/z"}, None) == {"e": "/tmp/z"}


def test_a_path_right_after_a_closing_angle_bracket_is_hidden_once() -> None:
    """A server path glued to markup (``</script>/srv/...``) is hidden; a root name put there by an earlier pass
    (``<temp>/x``) is not hidden again."""
    roots = [("<temp>", "/tmp")]
    assert hide_paths("</script>/srv/secret/model.onnx", roots) == "</script>…/secret/model.onnx"
    assert hide_paths("<b>/tmp/run/x</b>", roots) == "<b><temp>/run/x</b>"
    once = hide_paths("at /tmp/run/x and /srv/a/b", roots)
    assert once == "at <temp>/run/x and …/a/b" and hide_paths(once, roots) == once
