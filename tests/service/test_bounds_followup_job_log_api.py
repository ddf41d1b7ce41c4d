"""Security follow-up (SR2), ``GET /api/v1/jobs/{id}/log``: it served the whole stored log, however long (a job
whose agent logged for days made each viewer's request read, decode and send all of it). It now serves the newest
lines within :data:`~repliscope.service.routers.jobs.MAX_LOG_BYTES` (as the web's ``/jobs/{id}/log.txt``, through
the same :mod:`repliscope.service.job_log` function), ``?tail=N`` the newest N, the first line and the
``X-Log-Lines-Left-Out`` header saying how many earlier lines were left out; both are in the OpenAPI schema."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from repliscope.service import job_log
from repliscope.service.routers import jobs as jobs_router
from repliscope.store.service_tables import create_job

LINES = 5000


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, dict[str, str], str]]:
    """A client with a viewer's header and a job whose stored log holds :data:`LINES` lines (written in one go,
    as a log stored before the store capped logs could be)."""
    from repliscope.service.app import create_app
    from repliscope.service.config import ServiceConfig
    from repliscope.service.startup import first_start
    from repliscope.store.accounts import create_token

    db = tmp_path_factory.mktemp("sr2-log-api") / "service.db"
    app = create_app(ServiceConfig(db_url=f"sqlite:///{db}"))
    store = app.state.store
    first_start(store)
    viewer = create_token(store, "vic", "viewer")
    job = create_job(store, "evaluate", "efficientnet-lite0@1.0.0", "onnxruntime", "foolbox", {})
    log = "\n".join(
        job_log.entries(f"line {i} " + "x" * 80, "agent a1", at="2026-11-29T09:35:17Z") for i in range(LINES)
    )
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET log = :log WHERE id = :id"), {"log": log + "\n", "id": job.id})
    try:
        with TestClient(app) as client:
            yield client, {"Authorization": f"Bearer {viewer}"}, job.id
    finally:
        app.state.executor.shutdown(wait=True)
        app.state.cluster.close()


def test_a_long_log_is_served_as_its_newest_lines_within_the_byte_bound(
    api: tuple[TestClient, dict[str, str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, viewer, job_id = api
    whole = client.get(f"/api/v1/jobs/{job_id}/log", headers=viewer)  # 8 MiB: the whole (~0.5 MB) log fits
    assert whole.status_code == 200 and whole.headers["x-log-lines-left-out"] == "0"
    assert whole.text.splitlines()[0].startswith("line 0 ") and len(whole.text.splitlines()) == LINES
    monkeypatch.setattr(jobs_router, "MAX_LOG_BYTES", 64 << 10)
    r = client.get(f"/api/v1/jobs/{job_id}/log", headers=viewer)
    assert r.status_code == 200 and len(r.content) <= 64 << 10
    lines = r.text.splitlines()
    kept = len(lines) - 1
    assert r.headers["x-log-lines-left-out"] == str(LINES - kept) and 500 < kept < 800
    assert lines[0] == (
        f"{LINES - kept} earlier lines left out: this text holds the newest {kept} lines, at most 65536 bytes"
    )
    assert lines[1].startswith(f"line {LINES - kept} ") and lines[-1].startswith(f"line {LINES - 1} ")


def test_tail_serves_the_newest_lines_and_a_bad_or_misspelt_tail_is_a_422(
    api: tuple[TestClient, dict[str, str], str],
) -> None:
    client, viewer, job_id = api
    r = client.get(f"/api/v1/jobs/{job_id}/log?tail=3", headers=viewer)
    assert r.status_code == 200 and r.headers["x-log-lines-left-out"] == str(LINES - 3)
    assert [x.split(" x")[0] for x in r.text.splitlines()] == [
        f"{LINES - 3} earlier lines left out: this text holds the newest 3 lines, at most {8 << 20} bytes",
        f"line {LINES - 3}",
        f"line {LINES - 2}",
        f"line {LINES - 1}",
    ]
    for query, field in (("tail=0", "tail"), ("tail=1000001", "tail"), ("tail=-5", "tail"), ("tial=3", "tial")):
        bad = client.get(f"/api/v1/jobs/{job_id}/log?{query}", headers=viewer)
        assert bad.status_code == 422, query
        assert field in str(bad.json()), (query, bad.json())
    unknown = client.get(f"/api/v1/jobs/{job_id}/log?tial=3", headers=viewer).json()
    assert unknown["error"]["field"] == "query.tial" and "(allowed: tail)" in unknown["error"]["message"]


def test_the_bound_and_tail_are_in_the_openapi_schema(api: tuple[TestClient, dict[str, str], str]) -> None:
    client, _, _ = api
    operation = client.get("/openapi.json").json()["paths"]["/api/v1/jobs/{job_id}/log"]["get"]
    tail = next(p for p in operation["parameters"] if p["name"] == "tail")
    assert tail["in"] == "query" and tail["schema"]["anyOf"][0] == {"type": "integer", "minimum": 1, "maximum": 1000000}
    assert operation["responses"]["200"]["headers"]["X-Log-Lines-Left-Out"]["schema"] == {
        "type": "integer",
        "minimum": 0,
    }
    assert "8 MiB" in operation["description"]


def test_a_status_poll_reads_no_log(api: tuple[TestClient, dict[str, str], str]) -> None:
    """``GET /api/v1/jobs/{id}`` (what a client polls) read the job's whole log only to leave it out of the answer:
    it now selects every column but the log, as the listing does."""
    from sqlalchemy import event

    client, viewer, job_id = api
    engine = client.app.state.store.engine  # type: ignore[attr-defined]
    statements: list[str] = []

    def seen(*args: object) -> None:
        statements.append(str(args[2]))

    event.listen(engine, "before_cursor_execute", seen)
    try:
        polled = client.get(f"/api/v1/jobs/{job_id}", headers=viewer)
        listed = client.get("/api/v1/jobs?limit=1000", headers=viewer)
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert polled.status_code == 200 and polled.json()["status"] == "queued" and "log" not in polled.json()
    assert listed.status_code == 200 and [j["id"] for j in listed.json()] == [job_id]
    jobs_reads = [s for s in statements if "FROM jobs" in s]
    assert len(jobs_reads) == 2 and not any("jobs.log" in s for s in jobs_reads), jobs_reads
