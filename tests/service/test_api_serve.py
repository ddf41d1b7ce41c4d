"""``repliscope serve``: the first start prints the URL and a one-time admin token (which works) and registers
foolbox_imagenet; a second start on the same store prints no token."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _serve(db: str, port: int) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "repliscope.cli.main", "serve", "--port", str(port), "--db", db],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    deadline = time.monotonic() + 120
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            if proc.poll() is not None:
                raise AssertionError(f"serve exited: {proc.stdout.read()}") from None
            time.sleep(0.3)
    proc.terminate()
    out, _ = proc.communicate(timeout=30)
    lines = out.splitlines()
    return proc, lines


def test_serve_first_start_prints_url_and_a_one_time_admin_token(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'serve.db'}"
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "repliscope.cli.main", "serve", "--port", str(port), "--db", db],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().rstrip() for _ in range(5)]
        assert lines[0] == f"repliscope serve: http://localhost:{port}/  (API docs: http://localhost:{port}/docs)"
        assert lines[2] == "registered the dataset 'foolbox_imagenet'"
        assert lines[3] == f"agents: 1 live on an in-process LocalCluster ({socket.gethostname()}-{proc.pid})"
        match = re.fullmatch(r"admin token \(shown once, keep it\): (rs_[A-Za-z0-9_-]{43})", lines[4])
        assert match, lines
        token = match.group(1)
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(
                    f"http://127.0.0.1:{port}/api/v1/whoami", headers={"Authorization": f"Bearer {token}"}, timeout=2
                )
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.3)
        assert r.json() == {"name": "admin", "role": "admin"}
        datasets = httpx.get(f"http://127.0.0.1:{port}/api/v1/datasets", headers={"Authorization": f"Bearer {token}"})
        assert [d["name"] for d in datasets.json()] == ["foolbox_imagenet"]
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    _, again = _serve(db, _free_port())
    assert not any("token" in line for line in again) and not any("registered" in line for line in again)
    assert again[0].startswith("repliscope serve: http://localhost:")


def test_the_cli_imports_no_web_framework() -> None:
    code = (
        "import sys, repliscope, repliscope.cli.main; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'fastapi', 'starlette', 'uvicorn', 'alembic'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_jobs_left_by_a_previous_server_are_failed(tmp_path: Path) -> None:
    from repliscope.service.startup import fail_interrupted_jobs
    from repliscope.store.repository import RunStore
    from repliscope.store.service_tables import create_job, get_job, update_job

    store = RunStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    queued = create_job(store, "evaluate", "m@1", "onnxruntime", "foolbox_imagenet", {})
    running = create_job(store, "evaluate", "m@1", "onnxruntime", "foolbox_imagenet", {})
    update_job(store, running.id, status="running")
    done = create_job(store, "evaluate", "m@1", "onnxruntime", "foolbox_imagenet", {})
    update_job(store, done.id, status="running")
    update_job(store, done.id, status="succeeded")
    assert fail_interrupted_jobs(store) == 2
    for job_id in (queued.id, running.id):
        job = get_job(store, job_id)
        assert job.status == "failed" and job.error == "interrupted: the server stopped before the job finished"
    assert get_job(store, done.id).status == "succeeded"
    assert fail_interrupted_jobs(store) == 0


def test_a_port_in_use_is_an_input_error_before_any_token_is_made(tmp_path: Path) -> None:
    """Regression: uvicorn's bind failure came after the one-time admin token was created and shown, exit 3."""
    from repliscope.store.accounts import has_admin
    from repliscope.store.repository import RunStore

    db = f"sqlite:///{tmp_path / 'busy.db'}"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "repliscope.cli.main", "serve", "--port", str(port), "--db", db],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"cannot serve on 127.0.0.1:{port}" in done.stdout + done.stderr
    assert "admin token" not in done.stdout
    with RunStore(db) as store:
        assert not has_admin(store)


def test_an_unreachable_scheduler_is_an_input_error(tmp_path: Path) -> None:
    """``serve --scheduler`` connects before it listens: a scheduler nobody runs is an input error naming it (exit 2
    before the URL is printed); an address without its scheme says what to give."""
    from types import SimpleNamespace

    import pytest

    from repliscope.errors import RepliscopeError
    from repliscope.service.cluster import ClusterHandle
    from repliscope.service.startup import connect_agents

    pytest.importorskip("distributed", reason="the 'agents' extra (dask distributed) is not installed")
    address = f"tcp://127.0.0.1:{_free_port()}"
    app = SimpleNamespace(state=SimpleNamespace(cluster=ClusterHandle(address, timeout=1.0)))
    with pytest.raises(RepliscopeError, match=f"cannot connect to the scheduler {address}"):
        connect_agents(app, address)
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "repliscope.cli.main",
            "serve",
            "--port",
            str(_free_port()),
            "--db",
            f"sqlite:///{tmp_path / 'nosched.db'}",
            "--scheduler",
            "127.0.0.1:8786",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "give tcp://HOST:PORT" in bad.stderr and "repliscope serve: http://" not in bad.stdout
