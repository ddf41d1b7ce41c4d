"""Issue 32 item 6 through the service: registering a folder that holds a symlink into /proc (and a loop) answers at
once with a dataset that excludes the links; a registration that walks long stops at its time bound with a 422
naming it; a real ``repliscope serve`` sent SIGTERM during such a registration exits within a few seconds (the walk
ran in a non-daemon worker thread: uvicorn waited for the request, Python for the thread)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from repliscope.datasets.resolve import resolve_dataset
from tests.datasets.test_walk_bounds import fan, hostile_folder
from tests.service.test_api_serve import _free_port


def test_a_folder_with_a_symlink_into_proc_registers_at_once_without_the_links(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], tmp_path: Path
) -> None:
    root = hostile_folder(tmp_path / "data")
    start = time.monotonic()
    r = client.post(
        "/api/v1/datasets",
        json={"name": "hostile", "spec": f"{root}"},
        headers=headers_for("admin"),
    )
    assert time.monotonic() - start < 5
    assert r.status_code == 201, r.text
    assert r.json()["spec"] == str(root) and r.json()["annotates"] == ["labels"]
    ds = resolve_dataset(str(root))  # what a job on it reads
    assert [s.id for s in ds.samples] == ["cats/tabby_3.jpg", "dogs/dog_5.jpg"]
    assert [u for u in ds.unreadable_folders if "out of the dataset folder" in u] == [
        "passwd_1.jpg (symlink out of the dataset folder: not followed)",
        "proc (symlink out of the dataset folder: not followed)",
        "up (symlink out of the dataset folder: not followed)",
    ]


def test_a_registration_that_walks_too_long_is_a_422_naming_the_bound(
    client: TestClient, headers_for: Callable[[str], dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from repliscope.service.routers import datasets

    monkeypatch.setattr(datasets, "MAX_WALK_SECONDS", 0.5)
    root = fan(tmp_path / "fan", 12, 6)
    start = time.monotonic()
    r = client.post("/api/v1/datasets", json={"name": "fan", "spec": str(root)}, headers=headers_for("admin"))
    assert time.monotonic() - start < 5
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == "body.spec" or error.get("field") == "spec"
    assert f"listing {root} took longer than 0.5 s (walk bound max_seconds)" in error["message"]


def test_serve_stops_promptly_on_sigterm_during_a_long_registration(tmp_path: Path) -> None:
    root = fan(tmp_path / "fan", 12, 6)  # its walk runs into the 10 s bound
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-u",
            "-m",
            "repliscope.cli.main",
            "serve",
            "--port",
            str(port),
            "--db",
            f"sqlite:///{tmp_path / 'serve.db'}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline().rstrip() for _ in range(5)]
        token = re.fullmatch(r"admin token \(shown once, keep it\): (\S+)", lines[4])
        assert token, lines
        headers = {"Authorization": f"Bearer {token.group(1)}"}
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.3)
        answer: dict[str, Any] = {}

        def register() -> None:
            try:
                answer["response"] = httpx.post(
                    f"http://127.0.0.1:{port}/api/v1/datasets",
                    json={"name": "fan", "spec": str(root)},
                    headers=headers,
                    timeout=60,
                )
            except httpx.HTTPError as exc:
                answer["error"] = exc

        client = threading.Thread(target=register)
        client.start()
        time.sleep(1.5)  # the walk is under way
        assert client.is_alive() and proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        proc.wait(timeout=30)
        stopped_in = time.monotonic() - sent
        client.join(timeout=10)
        assert stopped_in < 5, f"serve took {stopped_in:.1f} s to stop after SIGTERM"
        response = answer.get("response")
        if response is not None:  # answered before the connection closed: the walk was stopped, said so
            assert response.status_code == 422 and "was stopped (the server is stopping)" in response.text
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
